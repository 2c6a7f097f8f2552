package bench

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/tensor"
)

// A bench generate child's dump: its final latents as little-endian
// float32 (path + ".latents") and its frames as 8-bit RGB (path +
// ".frames"), for the parent to compare runs of the same job.

func writeDump(path string, res *framepack.Result) error {
	lat := tensor.Float32s(res.Latents)
	b := make([]byte, 4*len(lat))
	for i, v := range lat {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	if err := os.WriteFile(path+".latents", b, 0o644); err != nil {
		return err
	}
	return os.WriteFile(path+".frames", res.Pix, 0o644)
}

func removeDump(path string) {
	os.Remove(path + ".latents")
	os.Remove(path + ".frames")
}

// compareDumps is how far run is from ref: the relative L2 distance of the
// final latents and the PSNR (dB) of the frames, all frames together;
// identical says the frames are equal (PSNR infinite, then 0 here).
func compareDumps(ref, run string) (relL2, psnr float64, identical bool, err error) {
	read := func(path string) ([]byte, []byte, error) {
		lat, err := os.ReadFile(path + ".latents")
		if err != nil {
			return nil, nil, err
		}
		fr, err := os.ReadFile(path + ".frames")
		return lat, fr, err
	}
	rl, rf, err := read(ref)
	if err != nil {
		return 0, 0, false, err
	}
	ul, uf, err := read(run)
	if err != nil {
		return 0, 0, false, err
	}
	if len(rl) != len(ul) || len(rf) != len(uf) || len(rf) == 0 {
		return 0, 0, false, fmt.Errorf("the runs made videos of different sizes (%d and %d latent bytes, %d and %d frame bytes)",
			len(rl), len(ul), len(rf), len(uf))
	}
	var num, den float64
	for i := 0; i+4 <= len(rl); i += 4 {
		a := float64(math.Float32frombits(binary.LittleEndian.Uint32(rl[i:])))
		b := float64(math.Float32frombits(binary.LittleEndian.Uint32(ul[i:])))
		num += (b - a) * (b - a)
		den += a * a
	}
	relL2 = math.Sqrt(num / den)
	var se float64
	for i := range rf {
		d := float64(rf[i]) - float64(uf[i])
		se += d * d
	}
	if se == 0 {
		return relL2, 0, true, nil
	}
	psnr = 10 * math.Log10(255*255/(se/float64(len(rf))))
	return relL2, psnr, false, nil
}
