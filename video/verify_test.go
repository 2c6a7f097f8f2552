package video

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// TestMP4FramesIsFFprobes: the frame count read from an MP4's or a .mov's
// index is ffprobe's packet count, at lengths from one frame to more than
// x264's lookahead; an index that lies — more or fewer samples than its
// chunks hold, a sample past the data, no video track — is an error.
func TestMP4FramesIsFFprobes(t *testing.T) {
	needFFmpeg(t)
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Fatal("ffmpeg without ffprobe: the check of this test has no reference")
	}
	dir := t.TempDir()
	var mp4 []byte
	for _, c := range []struct {
		name   string
		frames int
	}{{"a.mp4", 1}, {"b.mp4", 45}, {"c.mov", 7}} {
		path := filepath.Join(dir, c.name)
		// WriteMP4 checks MP4Frames against the frames written itself;
		// ffprobe is the independent count.
		if err := WriteMP4(context.Background(), path, noiseFrames(c.frames, 16, 32), Options{}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := MP4Frames(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0", "-count_packets",
			"-show_entries", "stream=nb_read_packets", "-of", "csv=p=0", path).Output()
		if err != nil {
			t.Fatalf("ffprobe %s: %v", c.name, err)
		}
		if want := strings.TrimSpace(string(out)); strconv.Itoa(got) != want || got != c.frames {
			t.Errorf("%s: %d frames in its index, ffprobe counts %s, %d written", c.name, got, want, c.frames)
		}
		if c.frames == 45 {
			mp4 = b
		}
	}

	// at is the offset of the first box of type typ in b (its type field).
	at := func(b []byte, typ string) int {
		i := bytes.Index(b, []byte(typ))
		if i < 4 {
			t.Fatalf("no %s box", typ)
		}
		return i
	}
	edit := func(fn func(b []byte)) []byte {
		b := append([]byte(nil), mp4...)
		fn(b)
		return b
	}
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"one sample more in stsz", edit(func(b []byte) {
			i := at(b, "stsz") + 12 // after the type: version and flags, the fixed size, the count
			binary.BigEndian.PutUint32(b[i:], binary.BigEndian.Uint32(b[i:])+1)
		}), "stsz"},
		{"one sample fewer in stsz", edit(func(b []byte) {
			i := at(b, "stsz") + 12
			binary.BigEndian.PutUint32(b[i:], binary.BigEndian.Uint32(b[i:])-1)
		}), "more samples than stsz"},
		{"a chunk past the end", edit(func(b []byte) {
			i := at(b, "stco") + 12 // the first chunk's offset
			binary.BigEndian.PutUint32(b[i:], uint32(len(b)))
		}), "outside the file's mdat"},
		{"a sample larger than the data", edit(func(b []byte) {
			i := at(b, "stsz") + 16 // the first sample's size
			binary.BigEndian.PutUint32(b[i:], uint32(len(b)))
		}), "outside the file's mdat"},
		{"a sound track only", edit(func(b []byte) {
			copy(b[at(b, "hdlr")+12:], "soun") // after version and flags, pre_defined
		}), "no video track"},
	} {
		_, err := MP4Frames(bytes.NewReader(c.b), int64(len(c.b)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
