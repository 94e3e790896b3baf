// Package probe measures what attention heads do, in four groups:
//
//   - Capture: Record runs a model on a batch and keeps every layer's attention weights and head
//     outputs, with chosen heads ablated (zero, mean or uniform), without changing the model.
//   - Patterns: PrevToken, PrefixMatching (Olsson et al.'s induction score) and GroundTruth
//     score a head's weights against a pattern; Evaluate reports them with a model's accuracy.
//     FirstToken (attention sinks), DuplicateToken, OffsetProfile and Rollout (Abnar and
//     Zuidema's attention flow through every layer) need no task; RepeatedTokens draws Olsson
//     et al.'s repeated random sequences.
//   - Heads and pairs of heads: Entropy, Confidence, JSDistance, ArgmaxNMI, Similarity (chapter
//     000's ρ_ij) and MIPenalty, a differentiable estimate of the heads' mutual information.
//   - Causal importance: Importance (Michel et al.'s I_h = E|∂L/∂ξ_h|) on a task, ImportanceOn
//     on any sequences with their own targets, Ablate and Prune.
//
// Attention weights are laid out [B, H, T, Tk] as mha's Layer.Forward returns them with
// PerHeadWeights: w[((b·H + h)·T + t)·Tk + j] is α_{t,j}, the weight that query t of sequence b
// gives key j in head h. The pattern scores take them as a flat []float32 with the sizes passed
// explicitly; the other metrics take a *tensor.Tensor. Scores come back per head, averaged over
// the batch.
package probe
