//go:build !cgo

package gputest

import "errors"

var errNoCgo = errors.New("built without cgo")

func openCUDA() (runtimeAPI, string, error) { return nil, "", errNoCgo }
func openHIP() (runtimeAPI, string, error)  { return nil, "", errNoCgo }
