//go:build !cgo

package nccl

import (
	"time"

	"github.com/framepack-go/framepack/internal/dynlib"
)

var errNoCgo = dynlib.ErrNoCgo

// Comm is a communicator; this build cannot make one.
type Comm struct{}

func (c *Comm) Rank() int { return 0 }
func (c *Comm) Size() int { return 1 }

func (l *Lib) NewUniqueID() (UniqueID, error) { return UniqueID{}, errNoCgo }
func (l *Lib) NewComm(UniqueID, int, int, time.Duration, func() (func(), error)) (*Comm, error) {
	return nil, errNoCgo
}
func (c *Comm) Split(int, int) (*Comm, error)                         { return nil, errNoCgo }
func (c *Comm) Destroy() error                                        { return nil }
func (c *Comm) Abort() error                                          { return nil }
func (c *Comm) AsyncError() error                                     { return nil }
func (c *Comm) GroupStart() error                                     { return errNoCgo }
func (c *Comm) GroupEnd() error                                       { return errNoCgo }
func (c *Comm) Send(uintptr, int, DType, int, uintptr) error          { return errNoCgo }
func (c *Comm) Recv(uintptr, int, DType, int, uintptr) error          { return errNoCgo }
func (c *Comm) AllGather(uintptr, uintptr, int, DType, uintptr) error { return errNoCgo }
func (c *Comm) AllReduce(uintptr, uintptr, int, DType, RedOp, uintptr) error {
	return errNoCgo
}
