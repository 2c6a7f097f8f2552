package video

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFrames writes 12 frames of flat colours (each frame its own
// grey, which H.264 keeps to within a few levels), probes them and reads
// them back.
func TestReadFrames(t *testing.T) {
	if !HaveFFmpeg() {
		t.Skip("ffmpeg is not installed")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "in.mp4")
	f := Frames{T: 12, H: 48, W: 64, Pix: make([]uint8, 12*48*64*3)}
	for i := range f.Pix {
		f.Pix[i] = uint8(20 * (i / (48 * 64 * 3)))
	}
	if err := WriteMP4(context.Background(), path, f, Options{FPS: 24, CRF: 10}); err != nil {
		t.Fatal(err)
	}
	info, err := Probe(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if info.W != 64 || info.H != 48 || info.Codec != "h264" || info.FPS != 24 {
		t.Errorf("probe %+v, want 64×48 h264 at 24 fps", info)
	}
	var means []int
	n, err := ReadFrames(context.Background(), path, info, func(pix []uint8) error {
		sum := 0
		for _, v := range pix {
			sum += int(v)
		}
		means = append(means, sum/len(pix))
		return nil
	})
	if err != nil || n != 12 {
		t.Fatalf("%d frames, %v", n, err)
	}
	for i, m := range means {
		if d := m - 20*i; d < -3 || d > 3 {
			t.Errorf("frame %d: mean %d, want about %d", i, m, 20*i)
		}
	}
	// The callback's error stops the decode.
	stop := errors.New("enough")
	if n, err := ReadFrames(context.Background(), path, info, func([]uint8) error { return stop }); n != 0 || err != stop {
		t.Errorf("stopped: %d frames, %v", n, err)
	}
}

// TestProbeBadFiles: a file that is no video, one without a video stream
// and one whose frames are damaged each get an error naming the file.
func TestProbeBadFiles(t *testing.T) {
	if !HaveFFmpeg() {
		t.Skip("ffmpeg is not installed")
	}
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.mp4")
	os.WriteFile(junk, []byte("this is not a video at all, only words"), 0o644)
	if _, err := Probe(context.Background(), junk); err == nil || !strings.Contains(err.Error(), junk+": not a video ffmpeg can read") {
		t.Errorf("junk: %v", err)
	}
	audio := filepath.Join(dir, "tone.wav")
	if out, err := exec.Command("ffmpeg", "-v", "error", "-f", "lavfi", "-i", "sine=duration=0.1", audio).CombinedOutput(); err != nil {
		t.Skipf("ffmpeg cannot make a test tone: %v %s", err, out)
	}
	if _, err := Probe(context.Background(), audio); err == nil || !strings.Contains(err.Error(), "no video stream") {
		t.Errorf("audio only: %v", err)
	}

	// Frames damaged after the header: the header probes, the decode fails.
	good := filepath.Join(dir, "good.mkv")
	f := Frames{T: 30, H: 48, W: 64, Pix: make([]uint8, 30*48*64*3)}
	for i := range f.Pix {
		f.Pix[i] = uint8(i * 7)
	}
	if err := WriteMP4(context.Background(), good, f, Options{}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(good)
	for i := len(b) / 3; i < len(b)-16; i += 7 {
		b[i] ^= 0x5a
	}
	bad := filepath.Join(dir, "bad.mkv")
	os.WriteFile(bad, b, 0o644)
	info, err := Probe(context.Background(), bad)
	if err == nil {
		_, err = ReadFrames(context.Background(), bad, info, func([]uint8) error { return nil })
	}
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("damaged frames: %v", err)
	}
}
