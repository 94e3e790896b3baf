// Package circuits holds the causal and weight-based interpretability tools of issue 16 for an
// nn.Model (the shipped toy models and Hugging Face GPT-2, BERT and Llama-family folders alike):
// activation patching, direct logit attribution, the logit lens, and head composition.
//
// The causal part runs the model on prompts and reads one Metric, the logit difference
// logit(target) − logit(foil) at one position:
//
//   - Patch: activation patching (Meng et al. 2022; Wang et al. 2022) of every head's output, of
//     every head's attention pattern alone, and of the residual stream at every layer and
//     position, from a clean run into a corrupted one, batched over the patched runs;
//   - Attribute: direct logit attribution of the metric to the embeddings, every head, every
//     attention bias and every feed-forward network, through the final normalisation with its
//     scale frozen at the run's (TransformerLens's convention);
//   - LogitLens: the tokens the residual stream predicts after every layer, at every position.
//
// The weight-based part reads nothing but the parameters:
//
//   - Composition: the Q-, K- and V-composition scores of Elhage et al. (2021), "A Mathematical
//     Framework for Transformer Circuits", between every head and every head of a later layer,
//     with the score of random matrices of the same shapes as a baseline;
//   - OVCircuit, QKCircuit and TokenCircuits: each head's OV circuit W_E·W_OV·W_U and QK circuit
//     W_E·W_QK·W_Eᵀ over the vocabulary, and their top token pairs, for small vocabularies;
//   - Subspaces: the principal angles between the subspaces that the heads of one layer read (the
//     column spaces of W_i^Q, W_i^K, W_i^V) and write (the row spaces of W_i^O), with a verdict on
//     the chapters' claims that head subspaces "may intersect or be orthogonal" (chapter 000) and
//     are "h orthogonal subspaces" (chapter 003).
//
// # Conventions
//
// Matrices follow TransformerLens's row-vector convention: a residual-stream vector x is a row
// [1, d_model] and a head reads x·W_Q^h, x·W_K^h, x·W_V^h (W^h [d_model, d_head], the transposes
// of head h's rows of PyTorch's in_proj_weight) and writes z·W_O^h (W_O^h [d_head, d_model], the
// transpose of head h's columns of out_proj.weight). A head's OV circuit is W_V^h·W_O^h and its QK
// circuit W_Q^h·W_K^hᵀ, both [d_model, d_model] of rank ≤ d_head and never formed: every product
// goes through the [d_model, d_head] factors. Query head h of a model with grouped K/V heads reads
// K/V head h·Hkv/H (nn's and Hugging Face's repeat_kv). The score scale 1/√d_head is not part of
// the QK circuit (TransformerLens's QK leaves it out too); the scores are ratios of norms, so it
// would cancel there anyway. Rotary position embeddings are ignored, as TransformerLens ignores
// them: the QK circuit is the one at relative position 0.
//
// # Normalisation folding
//
// Unless WeightOptions.NoFold, the weights are folded as TransformerLens's from_pretrained folds
// them by default (fold_ln, center_writing_weights, center_unembed):
//
//   - every reader gets the weight γ of the normalisation that produces its input folded in,
//     W_Q ← diag(γ)·W_Q (and W_K, W_V, and W_U for the unembedding), and, for LayerNorm models,
//     the mean over d_model of each column removed, since LayerNorm's output has none (for
//     RMSNorm, which does not centre, only γ is folded);
//   - for LayerNorm models every writer is centred: each row of W_O^h has its mean over d_model
//     removed (a constant direction is removed by the reader's normalisation anyway);
//   - with sandwich norms (nn.Config.SandwichNorm: Gemma 3), whose ln1_post normalises what the
//     heads write before it joins the stream, every writer gets that norm's γ′ folded in, W_O ←
//     W_O·diag(γ′) (centred before and after for LayerNorm);
//   - the OV circuit's logits have each source token's mean over the output tokens removed
//     (softmax ignores a constant added to every logit; TransformerLens's center_unembed).
//
// The normalisation that produces a layer's input is that layer's ln1 in a pre-norm model; in a
// post-norm model (BERT) it is the last normalisation of the layer before (ln2, or ln1 in an
// attention-only block), and emb_ln (if any) for layer 0. The unembedding's is ln_f (pre-norm),
// the last block's last normalisation (post-norm), or head_ln with a masked-LM head transform
// (BERT), whose dense layer and activation, being nonlinear, are left out: the OV circuit then
// says what a head writes read directly through the unembedding. Between two heads of a post-norm
// model the normalisations of the layers in between are not folded (TransformerLens defines no
// folding for post-norm models): their γ rescale the path, and the scores are approximate there.
// The normalisation's division by the input's scale is a per-token scalar and is dropped, as in
// fold_ln. Biases are left out everywhere: the scores and circuits are those of the weights.
//
// Half-precision parameters (nn.NewModelHalf) are decoded exactly. Arithmetic is float64, except
// the bulk of Composition, the products of every writer's W_O^h with every reader's W_Q, W_K, W_V
// (d_model³ per layer pair and mode), which run in float32 SGEMM on all cores (relative error
// about 1e-6; the PyTorch float64 goldens agree within 1e-4): a 12-layer, 12-head, d_model 768
// model takes seconds.
package circuits
