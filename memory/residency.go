package memory

import "fmt"

// State is where a model's weights are.
type State uint8

const (
	// Unloaded: nothing held, on the device or on the host.
	Unloaded State = iota
	// OnHost: weights in host memory only; the device holds none of them.
	OnHost
	// Streamed: a prefix of the weights stays on the device within a limit;
	// the rest is uploaded group by group ahead of use and freed after it
	// (FramePack's DynamicSwap, with the preserved amount kept free).
	Streamed
	// Resident: every weight on the device.
	Resident
)

var stateNames = [...]string{"unloaded", "on host", "streamed", "resident"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Placeable is a model whose weights the Manager places. It charges its
// device allocations to its name with Backend.Charge, so that the Manager
// can check a complete unload.
type Placeable interface {
	// DeviceBytes is what the weights take on the device when resident.
	DeviceBytes() int64
	// Place moves the weights to st. For Streamed, limit is the most the
	// part kept on the device may hold (≥ 0); other states ignore it. On
	// error the weights stay where they were.
	Place(st State, limit int64) error
}
