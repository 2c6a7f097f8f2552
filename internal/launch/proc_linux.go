package launch

import "syscall"

// A rank dies with the supervisor: nothing is left holding a GPU or waiting
// in a collective when the supervisor is killed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
