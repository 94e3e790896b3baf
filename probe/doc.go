// Package probe measures what attention heads do. Its functions take attention weights as mha's
// Layer.Forward returns them with PerHeadWeights: a flat []float32 laid out [B, H, T, T], where
// w[((b·H + h)·T + t)·T + j] is α_{t,j}, the weight that query t of sequence b gives key j in head
// h, with the sizes passed explicitly. Scores come back per head, averaged over the batch.
package probe
