package sampler

import (
	"encoding/binary"
	"fmt"
	"math"
)

// torchGeneratorState tags a marshalled TorchGenerator (and its layout).
const torchGeneratorState = "fpmt1"

// MarshalBinary is the generator's whole state — the MT19937 words, the
// position in them and the scalar path's cached normal — so that a job
// checkpointed between sections draws, once restored, the noise it would
// have drawn had it never stopped.
func (g *TorchGenerator) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, len(torchGeneratorState)+4*mtN+4+1+8)
	b = append(b, torchGeneratorState...)
	for _, w := range g.mt {
		b = binary.LittleEndian.AppendUint32(b, w)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(g.idx))
	cache := byte(0)
	if g.hasCache {
		cache = 1
	}
	b = append(b, cache)
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(g.cached)), nil
}

// UnmarshalBinary restores a state MarshalBinary made.
func (g *TorchGenerator) UnmarshalBinary(b []byte) error {
	n := len(torchGeneratorState)
	if len(b) != n+4*mtN+4+1+8 || string(b[:n]) != torchGeneratorState {
		return fmt.Errorf("sampler: not a generator state (%d bytes)", len(b))
	}
	var s TorchGenerator
	for i := range s.mt {
		s.mt[i] = binary.LittleEndian.Uint32(b[n+4*i:])
	}
	o := n + 4*mtN
	idx := binary.LittleEndian.Uint32(b[o:])
	if idx > mtN || b[o+4] > 1 {
		return fmt.Errorf("sampler: generator state out of range (position %d)", idx)
	}
	s.idx, s.hasCache = int(idx), b[o+4] == 1
	s.cached = math.Float64frombits(binary.LittleEndian.Uint64(b[o+5:]))
	*g = s
	return nil
}
