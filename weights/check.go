package weights

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/framepack-go/framepack/tensor"
)

// Spec is one weight a model reads: its checkpoint name and shape (no shape
// check when Shape is empty); an optional one may be absent.
type Spec struct {
	Name     string
	Shape    []int
	Optional bool
}

// Numel is the element count of the shape.
func (s Spec) Numel() int64 {
	n := int64(1)
	for _, d := range s.Shape {
		n *= int64(d)
	}
	return n
}

// Check verifies, from the file headers only, that the checkpoint can give
// every weight of specs: each is present, with its shape, in a
// floating-point dtype (F32, F16, BF16, F64), and no tensor is stored in two
// files of a sharded checkpoint. Every file's header is read (no tensor
// data). The error names the file and the first problem, and counts the
// others.
func (c *Checkpoint) Check(specs []Spec) error {
	var first string
	more := 0
	fail := func(format string, args ...any) {
		if first == "" {
			first = fmt.Sprintf(format, args...)
		} else {
			more++
		}
	}
	if err := c.checkShards(); err != nil {
		return err
	}
	for _, sp := range specs {
		if sp.Optional && !c.Has(sp.Name) {
			continue
		}
		e, sh, _, err := c.entry(sp.Name)
		switch {
		case err != nil:
			fail("%s", strings.TrimPrefix(err.Error(), "weights: "))
		case e.problem != "":
			fail("%s: tensor %q: %s", sh.path, e.name, e.problem)
		case e.dt != tensor.F32 && e.dt != tensor.F16 && e.dt != tensor.BF16 && e.dt != tensor.F64:
			fail("%s: tensor %q is %s, not a floating-point dtype (f32, f16, bf16)", sh.path, e.name, e.dtype)
		case len(sp.Shape) > 0 && !slices.Equal(sp.Shape, e.shape):
			fail("%s: tensor %q has shape %v, want %v", sh.path, e.name, e.shape, sp.Shape)
		}
	}
	if first == "" {
		return nil
	}
	switch {
	case more == 1:
		first += " (and 1 more problem)"
	case more > 1:
		first += fmt.Sprintf(" (and %d more problems)", more)
	}
	return fmt.Errorf("weights: %s", first)
}

// checkShards opens every file and reports a tensor that two files hold.
func (c *Checkpoint) checkShards() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("weights: %s: checkpoint is closed", c.where)
	}
	if len(c.shards) < 2 {
		return nil
	}
	holder := map[string]*shard{}
	for _, sh := range c.shards {
		if err := sh.open(); err != nil {
			return err
		}
		for name := range sh.hdr.entries {
			if other, ok := holder[name]; ok {
				msg := fmt.Sprintf("weights: tensor %q is stored in two shards, %s and %s", name, other.path, sh.path)
				if in := c.byName[name]; in != nil {
					msg += " (the index names " + filepath.Base(in.path) + ")"
				}
				return errors.New(msg)
			}
			holder[name] = sh
		}
	}
	return nil
}
