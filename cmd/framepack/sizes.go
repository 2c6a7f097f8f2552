package main

import (
	"github.com/spf13/pflag"

	"github.com/framepack-go/framepack/memory"
)

// The memory sizes (--vram-limit, --preserve, --ram-limit) are parsed once,
// as their flags are read (memory.Size is a pflag.Value), and go on typed: a
// bad value is a usage error naming the flag, before anything runs.

// checkedSize is a size flag with a check that needs no device: a cap below
// the least the engine needs, a host budget of 0.
type checkedSize struct {
	*memory.Size
	check func(memory.Size) error
}

func (c checkedSize) Set(s string) error {
	var z memory.Size
	if err := z.Set(s); err != nil {
		return err
	}
	if err := c.check(z); err != nil {
		return err
	}
	*c.Size = z
	return nil
}

// vramLimitVar defines --vram-limit, the cap on device memory.
func vramLimitVar(fl *pflag.FlagSet, p *memory.Size, usage string) {
	fl.Var(checkedSize{p, memory.CheckCap}, "vram-limit", usage)
}

// preserveVar defines --preserve, the device memory kept free for
// activations while weights stream.
func preserveVar(fl *pflag.FlagSet, p *memory.Size, usage string) {
	fl.Var(p, "preserve", usage)
}

// ramLimitVar defines --ram-limit, the host memory budget.
func ramLimitVar(fl *pflag.FlagSet, p *memory.Size, usage string) {
	fl.Var(checkedSize{p, memory.CheckHostLimit}, "ram-limit", usage)
}

// mustSize is a size written in the program (a flag's default).
func mustSize(s string) memory.Size {
	z, err := memory.ParseSize(s)
	if err != nil {
		panic(err)
	}
	return z
}
