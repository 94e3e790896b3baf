package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"runtime"

	"github.com/mhalab/mha/lab"
	"github.com/spf13/cobra"
)

func newLabCmd() *cobra.Command {
	var (
		addr   string
		open   bool
		models []string
	)
	cmd := &cobra.Command{
		Use:   "lab [--addr 127.0.0.1:8080] [--open=false] [--model DIR|CHECKPOINT]…",
		Short: "Serve the lab: see and measure what every head of the shipped models, or of yours, does",
		Long: `Lab serves a page, embedded in this binary and needing no network, that opens on the shipped
models: pick a task, type or generate a sequence, and see the model's predictions, the head view
(lines from each query to the keys it attends, hover a token to focus on it), the model view (all
layers × heads, click one to enlarge it), every head's metrics (entropy, confidence, previous-token,
prefix-matching, ground-truth, importance) and how alike the heads of a layer are (ρ, Jensen–Shannon
distance, argmax NMI); ablate heads and see what changes; in the Circuits tab, patch a clean prompt
into a corrupted one head by head, pattern by pattern and position by position, with the direct
logit attribution and the heads' composition; download any picture as PNG or SVG; run the
chapters' experiments.

--model adds a model of yours beside the shipped ones (repeat it for several): a Hugging Face folder
(GPT-2, BERT, Llama, Mistral, Qwen2: config.json, model.safetensors, tokenizer.json) or a checkpoint
that mha train wrote. Type text and it is encoded with the model's tokenizer (BERT: write [MASK]
where it should guess); the page shows the tokenizer's pieces, the next-token (or masked-token)
predictions, the heads' metrics on the text (with attention to the first token, duplicate-token,
the offset profile, the rollout, and the heads' importance to the model's own next-token loss),
and, under "Repeated tokens", induction and duplicate-token scores on random tokens repeated once.
A model without a task has no seeds, task scores or pruning. Sequences are limited to 64 tokens.
A path that does not open stops the command before it serves anything.

It listens on 127.0.0.1 unless --addr names another address: the lab has no authentication, so
listening beyond loopback (e.g. --addr :8080) lets anyone who can reach the port use it. Port 0
picks a free port. Ctrl-C stops it.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serveLab(cmd.Context(), addr, open, models, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on, HOST:PORT (port 0: any free port)")
	fl.BoolVar(&open, "open", true, "open the page in the default browser")
	fl.StringArrayVar(&models, "model", nil, "a Hugging Face model `DIR` or a checkpoint of mha train to add to the lab; repeat for more")
	return cmd
}

// serveLab serves the lab, with the user's models, on addr until ctx is done, printing its URL
// to stdout and warnings to stderr; with open it also asks the desktop to open the page.
func serveLab(ctx context.Context, addr string, open bool, models []string, stdout, stderr io.Writer) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--addr %q: want HOST:PORT such as 127.0.0.1:8080 (%v)", addr, err)
	}
	srv, err := lab.New(lab.Options{Models: models})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", addr, err)
	}
	tcp := ln.Addr().(*net.TCPAddr)
	url := fmt.Sprintf("http://%s/", ln.Addr())
	if tcp.IP.IsUnspecified() {
		url = fmt.Sprintf("http://127.0.0.1:%d/", tcp.Port)
	}
	if !tcp.IP.IsLoopback() {
		fmt.Fprintf(stderr, "mha lab: warning: listening on %s, which other machines can reach; the lab has no authentication\n", ln.Addr())
	}
	fmt.Fprintf(stdout, "mha lab: serving %s (Ctrl-C to stop)\n", url)
	if open {
		if err := openBrowser(url); err != nil {
			fmt.Fprintf(stderr, "mha lab: could not open a browser (%v); open %s yourself\n", err, url)
		}
	}
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "mha lab: stopped")
	return nil
}

// openBrowser asks the desktop to open url, without waiting for the browser.
func openBrowser(url string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", url)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		cmd = exec.Command("xdg-open", url)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait() // reap it; the browser outlives the opener
	return nil
}
