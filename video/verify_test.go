package video

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// noiseFrames are frames of random pixels, which compress badly: about
// 20 KB a frame at 128×96 and CRF 16.
func noiseFrames(t, h, w int) Frames {
	f := Frames{T: t, H: h, W: w, Pix: make([]uint8, t*h*w*3)}
	rand.New(rand.NewSource(1)).Read(f.Pix)
	return f
}

func needFFmpeg(t *testing.T) {
	t.Helper()
	if !HaveFFmpeg() {
		t.Skip("ffmpeg is not installed (apt-get install ffmpeg)")
	}
}

// TestVerifyTruncated: every container ffmpeg writes checks out whole, and
// fails cut at any point — what a full disk leaves.
func TestVerifyTruncated(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	for _, name := range []string{"a.mp4", "a.mov", "a.mkv"} {
		path := filepath.Join(dir, name)
		if err := WriteMP4(context.Background(), path, noiseFrames(5, 32, 48), Options{}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		format := containerFormat(path)
		verify := VerifyMP4
		if format == "matroska" {
			verify = VerifyMatroska
		}
		if err := verify(bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatalf("%s, whole: %v", name, err)
		}
		for _, n := range []int{0, 4, 8, 30, len(b) / 3, len(b) / 2, len(b) - 100, len(b) - 1} {
			if err := verify(bytes.NewReader(b[:n]), int64(n)); err == nil {
				t.Errorf("%s cut to %d of %d bytes passes", name, n, len(b))
			} else if n == len(b)/2 {
				t.Logf("%s cut to %d bytes: %v", name, n, err)
			}
		}
		// Trailing junk breaks the tiling of the top-level boxes too.
		if format != "matroska" {
			junk := append(append([]byte{}, b...), 0, 0, 0)
			if err := verify(bytes.NewReader(junk), int64(len(junk))); err == nil {
				t.Errorf("%s with 3 stray bytes passes", name)
			}
		}
	}
	// An mdat and a moov without ftyp, and an ftyp alone.
	box := func(typ string, body int) []byte {
		b := make([]byte, 8+body)
		b[3] = byte(8 + body)
		copy(b[4:], typ)
		return b
	}
	for _, c := range []struct {
		b    []byte
		want string
	}{
		{append(box("mdat", 4), box("moov", 0)...), "not ftyp"},
		{box("ftyp", 8), "no moov"},
		{append(box("ftyp", 8), box("moov", 0)...), "no mdat"},
	} {
		err := VerifyMP4(bytes.NewReader(c.b), int64(len(c.b)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.b, err, c.want)
		}
	}
}

// TestWriteFullDisk writes onto a 64 KiB tmpfs: ffmpeg exits 0 there
// after "Error writing trailer: No space left on device", so only the
// checks catch it. The write must fail and leave nothing.
func TestWriteFullDisk(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "framepack-test", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs here (needs root): %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() { syscall.Unmount(dir, 0) })
	// 33 frames fill the disk while ffmpeg writes the frames (it exits
	// 1); 8 frames fit, their index does not (ffmpeg exits 0).
	for _, c := range []struct {
		name   string
		frames int
	}{{"out.mp4", 33}, {"out.mp4", 8}, {"out.mkv", 33}, {"out.mkv", 8}} {
		name := c.name
		path := filepath.Join(dir, name)
		_, err := Write(context.Background(), path, noiseFrames(c.frames, 96, 128), Options{})
		if err == nil {
			st, _ := os.Stat(path)
			t.Fatalf("%s on a full disk: no error (%v)", name, st)
		}
		t.Logf("%s: %v", name, err)
		if !strings.Contains(err.Error(), path) {
			t.Errorf("the error does not name %s: %v", path, err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("a failed write left %d entries, first %s", len(ents), ents[0].Name())
		}
	}
	// PNG frames (ffmpeg missing) fail the same way.
	t.Setenv("PATH", t.TempDir())
	_, err := Write(context.Background(), filepath.Join(dir, "out.mp4"), noiseFrames(33, 96, 128), Options{})
	if err == nil {
		t.Fatal("PNG frames on a full disk: no error")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a failed PNG write left %d entries, first %s", len(ents), ents[0].Name())
	}
}
