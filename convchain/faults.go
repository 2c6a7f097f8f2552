package convchain

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/framepack-go/framepack/internal/envconfig"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
)

// FaultsEnv is the one setting for fault injection. Its value is a comma
// separated list of key=value items:
//
//	conv3d.<tier>=hang   the tier's algorithm search never returns (it runs
//	                     in a child process, which is killed at the search
//	                     deadline; a tier without a search gets a child
//	                     that only hangs)
//	conv3d.<tier>=error  the tier fails when it runs
//	conv3d.<tier>=oom    the tier runs out of memory when it runs
//	conv3d.<tier>=naive  the tier's plan resolves to the vendor's naive solver
//	alloc.nth=<N>        the Nth device allocation (1-based) fails with out of memory
//
// for example FRAMEPACK_FAULTS=conv3d.optimized=hang,conv3d.gemm=error,alloc.nth=57.
// Tier names are those of the chain (optimized, gemm, naive, cpu). A run
// with conv3d faults neither reads nor writes the remembered choices.
const FaultsEnv = envconfig.Faults

// Fault is what an injected fault makes a tier do.
type Fault string

const (
	FaultHang  Fault = "hang"
	FaultError Fault = "error"
	FaultOOM   Fault = "oom"
	FaultNaive Fault = "naive"
)

var faultKinds = []Fault{FaultHang, FaultError, FaultOOM, FaultNaive}

// Faults is a parsed FRAMEPACK_FAULTS.
type Faults struct {
	// Conv3d maps a tier name to its fault.
	Conv3d map[string]Fault
	// AllocNth > 0 fails that allocation.
	AllocNth int
}

var tierNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// ParseFaults reads a FRAMEPACK_FAULTS value ("" is no faults).
func ParseFaults(s string) (*Faults, error) {
	f := &Faults{Conv3d: map[string]Fault{}}
	if strings.TrimSpace(s) == "" {
		return f, nil
	}
	bad := func(item, why string) error {
		return fmt.Errorf("%s: item %q: %s (want conv3d.<tier>=hang|error|oom|naive or alloc.nth=<N>, comma separated)", FaultsEnv, item, why)
	}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, ok := strings.Cut(item, "=")
		if !ok {
			return nil, bad(item, "no '='")
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch {
		case key == "alloc.nth":
			n, err := strconv.Atoi(val)
			if err != nil || n <= 0 {
				return nil, bad(item, "N must be a positive integer")
			}
			if f.AllocNth != 0 {
				return nil, bad(item, "alloc.nth given twice")
			}
			f.AllocNth = n
		case strings.HasPrefix(key, "conv3d."):
			tier := strings.TrimPrefix(key, "conv3d.")
			if !tierNameRE.MatchString(tier) {
				return nil, bad(item, fmt.Sprintf("bad tier name %q", tier))
			}
			if !slices.Contains(faultKinds, Fault(val)) {
				return nil, bad(item, fmt.Sprintf("unknown fault %q", val))
			}
			if _, dup := f.Conv3d[tier]; dup {
				return nil, bad(item, "tier given twice")
			}
			f.Conv3d[tier] = Fault(val)
		default:
			return nil, bad(item, fmt.Sprintf("unknown key %q", key))
		}
	}
	return f, nil
}

// FaultsFromEnv parses $FRAMEPACK_FAULTS.
func FaultsFromEnv() (*Faults, error) { return ParseFaults(envconfig.Read().Faults) }

// Any reports whether any fault is set.
func (f *Faults) Any() bool { return f != nil && (len(f.Conv3d) > 0 || f.AllocNth > 0) }

// WrapBackend applies alloc.nth to a device backend (be itself when unset).
func (f *Faults) WrapBackend(be tensor.Backend) tensor.Backend {
	if f == nil || f.AllocNth <= 0 {
		return be
	}
	return memory.FailNth(be, f.AllocNth)
}

func (f *Faults) String() string {
	if f == nil {
		return ""
	}
	var items []string
	for _, t := range slices.Sorted(maps.Keys(f.Conv3d)) {
		items = append(items, "conv3d."+t+"="+string(f.Conv3d[t]))
	}
	if f.AllocNth > 0 {
		items = append(items, "alloc.nth="+strconv.Itoa(f.AllocNth))
	}
	return strings.Join(items, ",")
}
