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

// MaxLayers is the most layers (blocks) of one kind a model's config may
// ask for: far more than any checkpoint here holds (HunyuanVideo's
// transformer has 40 single blocks, LLaMA-3 8B 32 layers). A config asking
// for more is refused before its plan lists millions of weights.
const MaxLayers = 1000

// maxProblems bounds the weights Check examines once that many have
// problems: a config whose sizes do not fit the checkpoint can ask for
// millions of tensors it lacks.
const maxProblems = 1000

// Check verifies, from the file headers only, that the checkpoint can give
// every weight of specs: each is present, with its shape, in a
// floating-point dtype (F32, F16, BF16, F64), and no tensor is stored in two
// files of a sharded checkpoint. Every file's header is read (no tensor
// data). The error names the file and the first problem (a missing tensor
// with the names closest to it), and counts the others; when the specs ask
// for more tensors than the checkpoint holds, it says the config does not
// fit the weights. Past maxProblems problems only missing tensors are
// counted, and names are compared only for the first.
func (c *Checkpoint) Check(specs []Spec) error {
	if err := c.checkShards(); err != nil {
		return err
	}
	var first string
	problems, missing, required := 0, 0, 0
	fail := func(format string, args ...any) {
		if problems == 0 {
			first = fmt.Sprintf(format, args...)
		}
		problems++
	}
	for _, sp := range specs {
		_, present := c.resolve(sp.Name)
		if sp.Optional && !present {
			continue
		}
		required++
		if !present {
			missing++
			if problems == 0 {
				_, _, _, err := c.entry(sp.Name) // the error with the closest names
				fail("%s", strings.TrimPrefix(err.Error(), "weights: "))
			} else {
				problems++
			}
			continue
		}
		if problems >= maxProblems {
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
	if problems == 0 {
		return nil
	}
	more, atLeast := problems-1, ""
	if problems > maxProblems {
		atLeast = "at least "
	}
	switch {
	case more == 1:
		first += " (and 1 more problem)"
	case more > 1:
		first += fmt.Sprintf(" (and %s%d more problems)", atLeast, more)
	}
	if missing > 0 && required > len(c.names) {
		first += fmt.Sprintf("; the config asks for %d tensors and the checkpoint holds %d: its config.json does not fit these weights", required, len(c.names))
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
