// Package testmode tells tests which suite runs: the default one, which
// skips work whose result another test or an earlier run on this machine
// already proves, and variants that prove a path a default test covers
// with another parameter, or the full one (FRAMEPACK_TEST_FULL=1, as CI
// runs it), which does everything every time. A test that leaves work out
// in the default suite says what proves it instead.
package testmode

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strconv"
)

// Env is the environment variable that asks for the full suite.
const Env = "FRAMEPACK_TEST_FULL"

// Full reports whether the full suite runs.
func Full() bool {
	v := os.Getenv(Env)
	return v != "" && v != "0"
}

// WaitingTests lets up to n of a package's parallel tests run side by
// side, where -parallel (the cores, by default) was not given: for a
// package whose tests mostly wait — out ack waits, deadlines, hung
// children — and would hold the go command's slot idle, a core's worth of
// time, while they take turns. TestMain calls it before m.Run.
func WaitingTests(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(n))
	}
}

// Key is a cache key for a deterministic check: the hash of everything its
// result depends on (the tool's identity, its arguments, its inputs).
func Key(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		var n [8]byte
		for i, l := 0, len(p); i < 8; i, l = i+1, l>>8 {
			n[i] = byte(l)
		}
		h.Write(n[:])
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// dir is where passed checks are remembered: the user cache's
// framepack/test-checks, "" where there is none.
func dir() string {
	c, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(c, "framepack", "test-checks")
}

// Passed reports whether the check with key passed before on this machine
// (Record), and the default suite runs: the full suite runs every check.
func Passed(key string) bool {
	if Full() || dir() == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(dir(), key))
	return err == nil
}

// Record remembers that the check with key passed.
func Record(key string) {
	if d := dir(); d != "" && os.MkdirAll(d, 0o755) == nil {
		os.WriteFile(filepath.Join(d, key), nil, 0o644)
	}
}
