package vae

// DecodeTiles is how many decoder runs (tiles) a decode of latents of
// latentShape (B, C, T, h, w) at tiling til makes: the total that
// DecodeOptions.Progress counts to, unless an out-of-memory retry shrinks
// the tiling.
func DecodeTiles(cfg Config, latentShape []int, til Tiling) int {
	if len(latentShape) != 5 {
		return 0
	}
	return len(decodeBoxes(&cfg, latentShape[2], latentShape[3], latentShape[4], til.normalized()))
}
