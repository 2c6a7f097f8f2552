// Package nccl loads NCCL (NVIDIA) or RCCL (AMD) at run time: the
// collectives that join one process per GPU. RCCL exports NCCL's API under
// the same names, so one set of bindings serves both.
package nccl

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/framepack-go/framepack/internal/dynlib"
)

// Vendor is the library family: AMD (RCCL) or NVIDIA (NCCL).
type Vendor = dynlib.Vendor

const (
	AMD    = dynlib.AMD
	NVIDIA = dynlib.NVIDIA
)

// NVLink SHARP (multicast) is turned off in every process that loads the
// library: its buffers are allocated by the driver outside any budget, and
// on the machines this engine runs on it has been a source of init
// failures. The variable must be set before the library initialises.
const nvlsEnv = "NCCL_NVLS_ENABLE"

// ChildEnv is the environment a process started by the engine gets so the
// same holds there.
func ChildEnv() []string { return []string{nvlsEnv + "=0"} }

func init() { os.Setenv(nvlsEnv, "0") }

// Lib is a loaded NCCL or RCCL. It stays loaded for the life of the process.
type Lib struct {
	vendor   Vendor
	path     string
	version  int
	hasSplit bool // ncclCommSplit is exported
}

// ErrNoSplit is Split's error where the library has no ncclCommSplit: the
// caller makes the subgroups' communicators with NewComm instead.
var ErrNoSplit = errors.New("nccl: this library has no ncclCommSplit (NCCL before 2.18, RCCL before ROCm 6)")

func (l *Lib) Vendor() Vendor { return l.vendor }
func (l *Lib) Path() string   { return l.path }

func (l *Lib) String() string {
	return fmt.Sprintf("%s %d.%d.%d (%s)", libs.Libraries[l.vendor].Name, l.version/10000, l.version/100%100, l.version%100, l.path)
}

var libs = dynlib.NewLoader[*Lib]("nccl",
	dynlib.ROCm("RCCL", "FRAMEPACK_RCCL", "librccl.so.1"),
	dynlib.CUDA("NCCL", "FRAMEPACK_NCCL", []string{"libnccl.so.2"}, dynlib.CUDADirs("/usr/lib/x86_64-linux-gnu")...))

// EnvPath names the variable that points a vendor's loader at one file.
func EnvPath(v Vendor) string { return libs.EnvPath(v) }

// OpenVendor loads the vendor's library; the error names every file tried.
func OpenVendor(v Vendor) (*Lib, error) { return libs.Open(v) }

// UniqueID is a communicator's rendezvous: rank 0 makes it, every rank
// passes it to NewComm.
type UniqueID [128]byte

// String is the id in hex, for an environment variable.
func (id UniqueID) String() string { return hex.EncodeToString(id[:]) }

// ParseUniqueID reads String's form.
func ParseUniqueID(s string) (UniqueID, error) {
	var id UniqueID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("nccl: communicator id %.20q… is not %d bytes of hex", s, len(id))
	}
	copy(id[:], b)
	return id, nil
}

// Error is a failed call: its ncclResult_t and the library's text for it.
type Error = dynlib.CallError

// DType is an element type as NCCL numbers it.
type DType int

const (
	Uint8   DType = 1
	Float32 DType = 7
)

// RedOp is a reduction.
type RedOp int

const Sum RedOp = 0
