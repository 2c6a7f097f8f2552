//go:build !linux

package launch

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
