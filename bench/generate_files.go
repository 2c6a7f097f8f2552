package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/framepack-go/framepack/weights"
)

// processStart is when this process started: its start time in clock
// ticks after boot (/proc/self/stat, field 22), against the time since
// boot now (/proc/uptime). Linux's user-visible tick is fixed at 100 Hz
// (USER_HZ), so the start is known to 10 ms.
func processStart() (time.Time, error) {
	now := time.Now()
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return time.Time{}, fmt.Errorf("the process start time: %w", err)
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start past the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	fields := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(fields) < 20 {
		return time.Time{}, errors.New("the process start time: /proc/self/stat has too few fields")
	}
	ticks, err := strconv.ParseInt(fields[19], 10, 64) // field 22: starttime
	if err != nil {
		return time.Time{}, fmt.Errorf("the process start time: /proc/self/stat starttime %q: %w", fields[19], err)
	}
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return time.Time{}, fmt.Errorf("the process start time: %w", err)
	}
	f := strings.Fields(string(up))
	if len(f) == 0 {
		return time.Time{}, errors.New("the process start time: /proc/uptime is empty")
	}
	uptime, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("the process start time: /proc/uptime: %w", err)
	}
	age := uptime - float64(ticks)/100
	return now.Add(-time.Duration(age * float64(time.Second))), nil
}

// modelWeightFiles lists the safetensors files of a model folder's parts
// (one level of folders, symbolic links followed).
func modelWeightFiles(dir string) ([]string, error) {
	parts, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range parts {
		sub := filepath.Join(dir, p.Name())
		if st, err := os.Stat(sub); err != nil || !st.IsDir() {
			continue
		}
		files, err := os.ReadDir(sub)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if strings.HasSuffix(f.Name(), ".safetensors") {
				out = append(out, filepath.Join(sub, f.Name()))
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no .safetensors files in the folders of %s", dir)
	}
	return out, nil
}

// diskSequentialRead drops the largest of files from the page cache and
// reads it front to back with one reader in 16 MiB reads (as dd bs=16M
// would): the disk's sequential read in GB/s, the reference for cold loads.
func diskSequentialRead(files []string) (float64, error) {
	var big string
	var size int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.Size() > size {
			big, size = f, st.Size()
		}
	}
	if err := weights.EvictFile(big); err != nil {
		return 0, fmt.Errorf("%s: %w", big, err)
	}
	fh, err := os.Open(big)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	buf := make([]byte, 16<<20)
	t := time.Now()
	var n int64
	for {
		k, err := fh.Read(buf)
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", big, err)
		}
	}
	secs := time.Since(t).Seconds()
	return float64(n) / 1e9 / max(secs, 1e-9), weights.EvictFile(big)
}
