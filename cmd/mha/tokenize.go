package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/mhalab/mha/tokenizer"
	"github.com/spf13/cobra"
)

func newTokenizeCmd() *cobra.Command {
	var (
		dir, text       string
		asJSON, special bool
	)
	cmd := &cobra.Command{
		Use:   "tokenize --model DIR --text STR [--json] [--special]",
		Short: "Split text into a model's tokens with its Hugging Face tokenizer.json",
		Long: `Tokenize reads DIR/tokenizer.json (and, for Llama and Gemma tokenizers, add_bos_token and
add_eos_token in DIR/tokenizer_config.json) and prints the ids and the tokens of --text, as Hugging
Face tokenizers encodes it: byte-level BPE (GPT-2, Llama-3, Qwen2), SentencePiece-style BPE
(Llama-2, Mistral) or WordPiece (BERT). DIR needs only the tokenizer files, no weights.

Special tokens written in the text (such as <|endoftext|>) are always found; the ones the model
adds around a text (BOS, or CLS and SEP) are left out unless --special. With --json it prints
{"ids": [...], "tokens": [...]}; otherwise a line of ids and a line of tokens, each quoted as a Go
string (byte-level tokenizers spell a space 'Ġ', SentencePiece ones '▁').`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fmt.Errorf("--model is required: a folder with the model's tokenizer.json")
			}
			if !cmd.Flags().Changed("text") {
				return fmt.Errorf("--text is required: the text to tokenize")
			}
			tok, err := tokenizer.LoadDir(dir)
			if err != nil {
				return err
			}
			enc, err := tok.Encode(text, special)
			if err != nil {
				return err
			}
			if asJSON {
				return writeTokensJSON(cmd.OutOrStdout(), enc)
			}
			return writeTokens(cmd.OutOrStdout(), enc)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "model", "", "the model folder: tokenizer.json, and optionally tokenizer_config.json")
	fl.StringVar(&text, "text", "", "the text to tokenize")
	fl.BoolVar(&asJSON, "json", false, `print {"ids": [...], "tokens": [...]}`)
	fl.BoolVar(&special, "special", false, "add the model's special tokens (BOS, or CLS and SEP)")
	return cmd
}

// writeTokens prints the ids on one line and the tokens, quoted, on the next.
func writeTokens(w io.Writer, enc tokenizer.Encoding) error {
	ids := make([]string, len(enc.IDs))
	for i, id := range enc.IDs {
		ids[i] = strconv.Itoa(id)
	}
	toks := make([]string, len(enc.Tokens))
	for i, t := range enc.Tokens {
		toks[i] = strconv.Quote(t)
	}
	_, err := fmt.Fprintf(w, "ids:    %s\ntokens: %s\n", strings.Join(ids, " "), strings.Join(toks, " "))
	return err
}

// writeTokensJSON prints {"ids": [...], "tokens": [...]}, tokens as JSON strings without HTML
// escapes (so "<s>" stays "<s>").
func writeTokensJSON(w io.Writer, enc tokenizer.Encoding) error {
	ids := make([]string, len(enc.IDs))
	for i, id := range enc.IDs {
		ids[i] = strconv.Itoa(id)
	}
	toks := make([]string, len(enc.Tokens))
	for i, t := range enc.Tokens {
		var b bytes.Buffer
		e := json.NewEncoder(&b)
		e.SetEscapeHTML(false)
		if err := e.Encode(t); err != nil {
			return err
		}
		toks[i] = strings.TrimSuffix(b.String(), "\n")
	}
	_, err := fmt.Fprintf(w, "{\"ids\": [%s], \"tokens\": [%s]}\n", strings.Join(ids, ", "), strings.Join(toks, ", "))
	return err
}
