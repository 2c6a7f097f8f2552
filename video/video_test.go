package video

import (
	"context"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

func TestToUint8(t *testing.T) {
	nan := float32(math.NaN())
	for _, c := range []struct {
		x    float32
		want uint8
	}{
		{-1, 0}, {1, 255}, {0, 127}, {0.5, 191}, {-0.5, 63}, {2, 255}, {-7, 0},
		{0.99, 253}, // 0.99·127.5 + 127.5 = 253.725
		{-0.996, 0}, // 0.51 truncates to 0
		{nan, 0},
	} {
		if got := toUint8(c.x); got != c.want {
			t.Errorf("toUint8(%v) = %d, want %d", c.x, got, c.want)
		}
	}
	// Against float64 math on a fine grid: truncation of (x·127.5 + 127.5)
	// rounded to f32 per operation.
	for i := -1200; i <= 1200; i++ {
		x := float32(i) / 1000
		cx := math.Max(-1, math.Min(1, float64(x)))
		want := uint8(float64(float32(float32(cx*127.5) + 127.5)))
		if got := toUint8(x); got != want {
			t.Fatalf("toUint8(%v) = %d, want %d", x, got, want)
		}
	}
}

// testPixels is (1, 3, T, H, W) with a distinct value per channel, frame
// and position.
func testPixels(tn, h, w int) (*tensor.Tensor, func(t, y, x, c int) uint8) {
	val := func(t, y, x, c int) float32 {
		return float32((t*7+y*3+x*5+c*11)%41)/20 - 1
	}
	data := make([]float32, 3*tn*h*w)
	for c := 0; c < 3; c++ {
		for ti := 0; ti < tn; ti++ {
			for y := 0; y < h; y++ {
				for x := 0; x < w; x++ {
					data[((c*tn+ti)*h+y)*w+x] = val(ti, y, x, c)
				}
			}
		}
	}
	return tensor.FromFloat32(data, 1, 3, tn, h, w), func(t, y, x, c int) uint8 { return toUint8(val(t, y, x, c)) }
}

func TestFromPixels(t *testing.T) {
	px, want := testPixels(3, 4, 6)
	f, err := FromPixels(px)
	if err != nil {
		t.Fatal(err)
	}
	if f.T != 3 || f.H != 4 || f.W != 6 || len(f.Pix) != 3*4*6*3 {
		t.Fatalf("frames %d×%d×%d, %d bytes", f.T, f.H, f.W, len(f.Pix))
	}
	for ti := 0; ti < 3; ti++ {
		for y := 0; y < 4; y++ {
			for x := 0; x < 6; x++ {
				for c := 0; c < 3; c++ {
					if got := f.Pix[((ti*4+y)*6+x)*3+c]; got != want(ti, y, x, c) {
						t.Fatalf("frame %d (%d, %d) channel %d: %d, want %d", ti, x, y, c, got, want(ti, y, x, c))
					}
				}
			}
		}
	}
	// f16 pixels (FramePack's) go through the same conversion.
	h16 := tensor.New(tensor.F16, px.Shape()...)
	tensor.NarrowF16(h16.Uint16s(), px.Float32s())
	f16, err := FromPixels(h16)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range tensor.Float32s(h16) {
		c, rest := i/(3*4*6), i%(3*4*6)
		if got := f16.Pix[3*rest+c]; got != toUint8(v) {
			t.Fatalf("f16 value %d: %d, want %d", i, got, toUint8(v))
		}
	}
	if _, err := FromPixels(tensor.FromFloat32(make([]float32, 3*2*2), 3, 1, 2, 2)); err == nil {
		t.Error("a 4-D tensor should be refused")
	}
	if _, err := FromPixels(tensor.FromInt64(make([]int64, 12), 1, 3, 1, 2, 2)); err == nil {
		t.Error("integer pixels should be refused")
	}
}

func emptyPath(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
}

func TestPNGFallback(t *testing.T) {
	emptyPath(t)
	px, want := testPixels(5, 8, 10)
	f, err := FromPixels(px)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "clip.mp4")
	got, err := Write(context.Background(), out, f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got != filepath.Join(dir, "clip_frames") {
		t.Errorf("wrote %s", got)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("no MP4 should exist without ffmpeg: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("the folder holds %d entries, want only the frames folder", len(ents))
	}
	frames, _ := os.ReadDir(got)
	if len(frames) != 5 {
		t.Fatalf("%d PNG files, want 5", len(frames))
	}
	r, err := os.Open(filepath.Join(got, "frame_00003.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	img, err := png.Decode(r)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 10 || b.Dy() != 8 {
		t.Fatalf("frame is %v", b)
	}
	for y := 0; y < 8; y++ {
		for x := 0; x < 10; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if uint8(r>>8) != want(3, y, x, 0) || uint8(g>>8) != want(3, y, x, 1) || uint8(b>>8) != want(3, y, x, 2) {
				t.Fatalf("pixel (%d, %d) differs", x, y)
			}
		}
	}
	// Writing again replaces the folder.
	f.T, f.Pix = 2, f.Pix[:2*8*10*3]
	if _, err := Write(context.Background(), out, f, Options{}); err != nil {
		t.Fatal(err)
	}
	if frames, _ := os.ReadDir(got); len(frames) != 2 {
		t.Errorf("after rewriting: %d PNG files, want 2", len(frames))
	}
}

func TestPNGCancelled(t *testing.T) {
	px, _ := testPixels(3, 4, 4)
	f, _ := FromPixels(px)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WritePNGs(ctx, filepath.Join(dir, "x"), f); err == nil {
		t.Fatal("a cancelled write should fail")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a cancelled write left %d entries", len(ents))
	}
}

// TestMP4Failure: an ffmpeg that writes half a file and fails leaves
// nothing behind.
func TestMP4Failure(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\nfor a; do last=$a; done\necho partial > \"$last\"\necho 'simulated failure' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "ffmpeg"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	px, _ := testPixels(2, 4, 4)
	f, _ := FromPixels(px)
	dir := t.TempDir()
	out := filepath.Join(dir, "v.mp4")
	err := WriteMP4(context.Background(), out, f, Options{})
	if err == nil || !strings.Contains(err.Error(), "simulated failure") {
		t.Fatalf("error %v should carry ffmpeg's message", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a failed write left %d entries", len(ents))
	}
}

func TestBadFrames(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []Frames{
		{},
		{T: 1, H: 2, W: 2, Pix: make([]uint8, 5)},
		{T: 1, H: 3, W: 2, Pix: make([]uint8, 18)}, // odd height for yuv420p
	} {
		if err := WriteMP4(context.Background(), filepath.Join(dir, "a.mp4"), f, Options{}); err == nil {
			t.Errorf("%d×%d×%d with %d bytes: no error", f.T, f.H, f.W, len(f.Pix))
		}
	}
	if err := WriteMP4(context.Background(), filepath.Join(dir, "a.mp4"), Frames{T: 1, H: 2, W: 2, Pix: make([]uint8, 12)}, Options{CRF: 60}); err == nil {
		t.Error("CRF 60 accepted")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("refused writes left %d entries", len(ents))
	}
}

// TestMP4 encodes with the real ffmpeg and reads the file back with
// ffprobe: frame count, size, codec, pixel format and rate.
func TestMP4(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg is not installed (scripts/setup.sh installs it)")
	}
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("ffprobe is not installed")
	}
	// A smooth moving gradient: H.264 keeps it close.
	data := make([]float32, 3*37*48*64)
	for i := range data {
		c, ti, y, x := i/(37*48*64), i/(48*64)%37, i/64%48, i%64
		data[i] = float32(math.Sin(float64(x+2*ti)/20+float64(c)) * math.Cos(float64(y)/15))
	}
	f, err := FromPixels(tensor.FromFloat32(data, 1, 3, 37, 48, 64))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "v.mp4")
	if got, err := Write(context.Background(), out, f, Options{}); err != nil || got != out {
		t.Fatalf("Write: %s, %v", got, err)
	}
	probe, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,width,height,pix_fmt,nb_read_frames,r_frame_rate", "-of", "default=noprint_wrappers=1", out).Output()
	if err != nil {
		t.Fatal(err)
	}
	info := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(probe)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			info[k] = v
		}
	}
	want := map[string]string{"codec_name": "h264", "width": "64", "height": "48", "pix_fmt": "yuv420p", "nb_read_frames": "37", "r_frame_rate": "30/1"}
	for k, v := range want {
		if info[k] != v {
			t.Errorf("%s = %q, want %q (ffprobe: %v)", k, info[k], v, info)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the folder holds %d entries, want only the MP4", len(ents))
	}
	// Decoded back, the frames are close to what went in (lossy codec).
	raw, err := exec.Command("ffmpeg", "-v", "error", "-i", out, "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1").Output()
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != len(f.Pix) {
		t.Fatalf("decoded %d bytes, want %d", len(raw), len(f.Pix))
	}
	var sum float64
	for i := range raw {
		d := float64(raw[i]) - float64(f.Pix[i])
		sum += d * d
	}
	if rmse := math.Sqrt(sum / float64(len(raw))); rmse > 4 {
		t.Errorf("decoded frames differ by RMSE %.1f", rmse)
	} else {
		t.Logf("round trip RMSE %.2f at CRF %s", rmse, strconv.Itoa(DefaultCRF))
	}
}
