package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/framepack-go/framepack"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/internal/device"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/sampler"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/vae/wan"
	"github.com/framepack-go/framepack/video"
	"github.com/framepack-go/framepack/weights"
)

// vaeFlags are the options `framepack vae decode` and `vae encode` share.
type vaeFlags struct {
	vaeDir, out         string
	device, dtype       string
	vramLimit, preserve memory.Size
}

func (f *vaeFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.vaeDir, "vae", "", "VAE folder: config.json + diffusion_pytorch_model.safetensors (HunyuanVideo's or Wan's vae/, by its _class_name)")
	fl.StringVarP(&f.out, "output", "o", "", "output file")
	fl.StringVar(&f.device, "device", "auto", "auto, gpu or cpu")
	fl.StringVar(&f.dtype, "dtype", "auto", "compute dtype: auto (f16 on a GPU, f32 on the CPU), f16, bf16 or f32")
	vramLimitVar(fl, &f.vramLimit, `hard cap on device memory ("20G", "90%"; default: the device's safe default)`)
	preserveVar(fl, &f.preserve, "memory kept free beside weights (default: FramePack's 6G, at most half the cap)")
}

// check validates the flags before anything loads; its errors are usage
// errors (exit status 2).
func (f *vaeFlags) check() error { return usage(f.checkFlags()) }

func (f *vaeFlags) checkFlags() error {
	if f.vaeDir == "" {
		return errors.New("--vae is required: the folder with config.json and diffusion_pytorch_model.safetensors")
	}
	if st, err := os.Stat(f.vaeDir); err != nil || !st.IsDir() {
		return fmt.Errorf("--vae %s: not a folder", f.vaeDir)
	}
	if f.out == "" {
		return errors.New("-o is required")
	}
	if _, err := device.ParseChoice(f.device); err != nil {
		return err
	}
	if f.dtype != "auto" {
		if _, err := tensor.ParseDType(f.dtype); err != nil {
			return fmt.Errorf("--dtype: %w", err)
		}
	}
	return nil
}

// openVAE opens the device and loads the half of a VAE that opts keep
// with load (vae.Load, wan.Load) in f.dtype (auto: f16 on a GPU, f32 on
// the CPU), logging its weights as name. release logs the conv3d chain's
// summary, closes the VAE and then the device.
func openVAE[V interface {
	WeightBytes() int64
	Close()
}](f *vaeFlags, log *slog.Logger, name string,
	load func(dir string, be tensor.Backend, opts vae.Options) (V, error), opts vae.Options) (d *device.Device, v V, release func(), err error) {
	d, err = device.Open(device.Options{Choice: f.device, VRAMLimit: f.vramLimit, Preserve: f.preserve, Log: log})
	if err != nil {
		return nil, v, nil, err
	}
	dt := tensor.F32
	if d.IsGPU() {
		dt = tensor.F16
	}
	if f.dtype != "auto" {
		dt, _ = tensor.ParseDType(f.dtype)
	}
	start := time.Now()
	opts.DType = dt
	v, err = load(f.vaeDir, d.Backend, opts)
	if err != nil {
		d.Close()
		return nil, v, nil, err
	}
	log.Info(fmt.Sprintf("%s: %s weights in %s on %s in %.1f s", name, memory.FormatBytes(v.WeightBytes()), dt,
		d.Name, time.Since(start).Seconds()))
	release = func() {
		convchain.LogSummary(d.Backend)
		v.Close()
		d.Close()
	}
	return d, v, release, nil
}

// withVAE opens the device and the half of a VAE that opts keep (see
// openVAE), runs use on them and releases both.
func withVAE[V interface {
	WeightBytes() int64
	Close()
}](f *vaeFlags, log *slog.Logger, name string, load func(string, tensor.Backend, vae.Options) (V, error), opts vae.Options,
	use func(d *device.Device, v V) error) error {
	d, v, release, err := openVAE(f, log, name, load, opts)
	if err != nil {
		return err
	}
	defer release()
	return use(d, v)
}

// withDecodeProgress runs decode, a one-section decode, showing its
// progress; decode reports its tiles through tile.
func withDecodeProgress(cmd *cobra.Command, log *slog.Logger, decode func(tile func(done, total int))) error {
	quiet, _ := cmd.Flags().GetBool("quiet")
	prog := newProgress(cmd.ErrOrStderr(), log, quiet, nil)
	prog.report(framepack.Progress{Stage: framepack.StageDecode, Section: 1, Sections: 1})
	err := tensor.Catch(func() {
		decode(func(done, total int) {
			prog.report(framepack.Progress{Stage: framepack.StageDecode, Section: 1, Sections: 1, Tile: done, Tiles: total})
		})
	})
	prog.done()
	return err
}

// writeFrames writes decoded pixels to out, logging it as what.
func writeFrames(cmd *cobra.Command, log *slog.Logger, what string, px *tensor.Tensor, out videoOutput, vo video.Options) error {
	frames, err := video.FromPixels(px)
	if err != nil {
		return err
	}
	vo.Log = log
	if err := out.write(cmd.Context(), frames, vo, log); err != nil {
		return err
	}
	notice(log, fmt.Sprintf("%s: wrote %s (%d frames)", what, out.path, px.Dim(2)))
	return nil
}

// encodedFinite refuses latents holding NaN or Inf, as generate refuses
// them at every stage: a VAE whose weights hold them (in dir) encodes every
// image so, and such latents are no use to anything.
func encodedFinite(dir string, lat *tensor.Tensor) error {
	if err := tensor.NonFiniteError("vae encode produced non-finite latents", lat); err != nil {
		return fmt.Errorf("%w; are the weights in %s whole?", err, dir)
	}
	return nil
}

// maxLatent bounds the latents a VAE decodes, once unscaled: real ones are
// within a few tens, and 1e30 decodes to a flat grey video.
const maxLatent = 1e4

// checkLatentScale refuses latents (of the file path) whose values, as
// the VAE in dir would take them (unscaled: as they are), reach beyond
// maxLatent: no VAE makes sense of them, and they decode to a flat video.
func checkLatentScale(path, dir string, z *tensor.Tensor, unscaled bool) error {
	peak := func(t *tensor.Tensor) float64 {
		var m float64
		for _, x := range t.Float32s() {
			m = max(m, math.Abs(float64(x)))
		}
		return m
	}
	p, how := peak(z), "as the file holds them (--unscaled)"
	if !unscaled {
		class, err := vaeClass(dir)
		if err != nil {
			return err
		}
		if class == wan.ClassName {
			cfg, err := wan.ReadConfig(dir)
			if err != nil {
				return err
			}
			p, how = peak(cfg.Denormalize(z)), "mapped from the normalized scale Wan's pipelines keep"
		} else {
			cfg, err := vae.ReadConfig(dir)
			if err != nil {
				return err
			}
			p, how = p/float64(cfg.ScalingFactor), fmt.Sprintf("divided by the scaling factor %g", cfg.ScalingFactor)
		}
	}
	if p > maxLatent {
		return fmt.Errorf("%s: the latents reach %.3g %s, beyond the %g a VAE takes: not latents of this VAE (or scaled twice?)", path, p, how, float64(maxLatent))
	}
	return nil
}

// saveLatents logs an encode that started at start (its activations: the
// device's peak less the weights) and writes lat as the tensor "latents" of
// path.
func saveLatents(log *slog.Logger, what string, d *device.Device, start time.Time, weightBytes int64, path string, lat *tensor.Tensor) error {
	log.Info(fmt.Sprintf("%s: %.2f s, activations peak %s; %s", what, time.Since(start).Seconds(),
		memory.FormatBytes(d.Backend.Stats().Peak-weightBytes), d.Backend))
	if err := weights.Save(path, map[string]*tensor.Tensor{"latents": lat}, nil); err != nil {
		return err
	}
	notice(log, fmt.Sprintf("%s: wrote %s (latents %v)", what, path, lat.Shape()))
	return nil
}

func newVAE() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vae",
		Short: "Decode latents to video, or encode an image to latents, with HunyuanVideo's or Wan 2.1's VAE",
	}
	cmd.AddCommand(newVAEDecode(), newVAEEncode())
	return cmd
}

func newVAEDecode() *cobra.Command {
	f := &vaeFlags{}
	var latents, tiling string
	var unscaled bool
	var crf, fps int
	var out videoOutput
	cmd := &cobra.Command{
		Use:   "decode --vae DIR --latents in.safetensors -o out.mp4",
		Short: "Decode latents (as FramePack keeps them: × scaling factor) into an MP4",
		Long: `Decode latents (B=1, 16, T, h, w) into 4T−3 frames of 8h×8w pixels and write them as an
H.264 MP4 through ffmpeg (libx264, yuv420p; -o ending in .mov or .mkv picks that
container), or as PNG frames in a folder: -o without extension, or NAME_frames when ffmpeg is
missing. The latents are divided by the VAE's scaling factor first, as FramePack keeps them
multiplied (--unscaled: they are not). The tensor is "latents", or the file's only tensor.

The VAE's config.json names its class: AutoencoderKLWan (Wan 2.1) decodes latents (1, 16, T, h,
w) one latent frame at a time into 1+4(T−1) frames, after mapping them from the normalized scale
Wan's pipelines keep (z·latents_std + latents_mean; --unscaled: as they are); its decode is always
frame by frame, so framewise and none are the same.

The pixels are rounded to the compute dtype, as FramePack's vae_decode returns them. The tiles
are chosen from the memory budget (--tiling auto), as generate chooses them, so the decode fits
before it starts; framewise is diffusers' default, spatial:TILE:STRIDE adds spatial tiles (pixels),
none decodes in one piece.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			if latents == "" {
				return usagef("--latents is required: a safetensors file with the latents")
			}
			til, auto, err := vae.ParseTiling(tiling)
			if err != nil {
				return usagef("--tiling %w", err)
			}
			if crf < 0 || crf > 51 {
				return usagef("--crf %d: want 0–51", crf)
			}
			if fps <= 0 || fps > 1000 {
				return usagef("--fps %d: want 1–1000", fps)
			}
			if out, err = checkVideoOutput(f.out, false); err != nil {
				return err
			}
			if err := checkNotInput(out, false, []input{{"--latents", latents}, {"--vae", f.vaeDir}}); err != nil {
				return err
			}
			z, err := readLatents(latents, "")
			if err != nil {
				return usage(err)
			}
			if z.Rank() != 5 || z.Dim(0) != 1 {
				return usagef("%s: latents are %v, want (1, channels, frames, height, width)", latents, z.Shape())
			}
			if err := checkLatentScale(latents, f.vaeDir, z, unscaled); err != nil {
				return usage(err)
			}
			if crf == 0 {
				crf = video.CRFZero
			}
			return runVAEDecode(cmd, f, z, til, auto, unscaled, out, video.Options{CRF: crf, FPS: fps})
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&latents, "latents", "", "safetensors file with the latents")
	fl.BoolVar(&unscaled, "unscaled", false, "the latents are not multiplied by the scaling factor")
	fl.StringVar(&tiling, "tiling", "auto", "auto, framewise, spatial:TILE:STRIDE or none")
	fl.IntVar(&crf, "crf", video.DefaultCRF, "x264 CRF (0–51, lower is better)")
	fl.IntVar(&fps, "fps", 30, "frames per second")
	return cmd
}

// readLatents reads the tensor name ("latents" when empty: then the only
// tensor also does) as an f32 host tensor.
func readLatents(path, name string) (*tensor.Tensor, error) {
	ck, err := weights.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	if name != "" && !ck.Has(name) {
		return nil, fmt.Errorf("%s: no tensor %q", path, name)
	}
	if name == "" {
		name = "latents"
	}
	if !ck.Has(name) {
		names := ck.Names()
		if len(names) != 1 {
			return nil, fmt.Errorf("%s: no tensor \"latents\" and %d tensors to choose from", path, len(names))
		}
		name = names[0]
	}
	t, err := ck.Host(name)
	if err != nil {
		return nil, err
	}
	// A copy: the file's memory goes with ck.
	switch t.DType() {
	case tensor.F32, tensor.F16, tensor.BF16, tensor.F64:
	default:
		return nil, fmt.Errorf("%s: %s is %s, want a float tensor", path, name, t.DType())
	}
	out := tensor.New(tensor.F32, t.Shape()...)
	copy(out.Float32s(), t.ToFloat32())
	if err := tensor.NonFiniteError(fmt.Sprintf("%s: tensor %q", path, name), out); err != nil {
		return nil, err
	}
	return out, nil
}

func runVAEDecode(cmd *cobra.Command, f *vaeFlags, z *tensor.Tensor, til vae.Tiling, auto, unscaled bool, out videoOutput, vo video.Options) error {
	if class, err := vaeClass(f.vaeDir); err != nil {
		return err
	} else if class == wan.ClassName {
		return runWanDecode(cmd, f, z, til, auto, unscaled, out, vo)
	}
	log := slog.Default()
	return withVAE(f, log, "vae", vae.Load, vae.Options{NoEncoder: true}, func(d *device.Device, v *vae.VAE) error {
		cfg := v.Config()
		if z.Dim(1) != cfg.LatentChannels {
			return fmt.Errorf("latents %v: the VAE takes %d channels", z.Shape(), cfg.LatentChannels)
		}
		opts := vae.DecodeOptions{Tiling: til}
		var planned int64
		st := d.Backend.Stats()
		avail, err := d.DecodeRoom()
		if err != nil {
			return fmt.Errorf("vae decode: %w", err)
		}
		if auto {
			opts, planned = v.Plan(z.Shape(), avail)
		} else {
			planned = v.DecodePeak(z.Shape(), opts.Tiling)
		}
		T, h, w := z.Dim(2), z.Dim(3), z.Dim(4)
		ss := cfg.SpatialCompressionRatio
		log.Info(fmt.Sprintf("vae decode: latents %v → %d frames of %dx%d; %s; cap %s, %s free for activations, planned peak %s",
			z.Shape(), cfg.SampleFrames(T), h*ss, w*ss, opts.Tiling, memory.FormatBytes(st.Cap), memory.FormatBytes(avail),
			memory.FormatBytes(planned)))
		var ds vae.DecodeStats
		opts.Stats = &ds
		opts.Log = func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) }
		d.Backend.ResetPeak()
		hs := tensor.NewScope(d.CPU) // the pixels
		defer hs.Close()
		var px *tensor.Tensor
		opts.Context = cmd.Context()
		err = withDecodeProgress(cmd, log, func(tile func(done, total int)) {
			opts.Progress = tile
			if unscaled {
				px = section.DecodeUnscaled(hs, v, z, opts)
			} else {
				px = section.VAEDecode(hs, v, z, opts)
			}
		})
		if err != nil {
			return fmt.Errorf("vae decode: %w", err)
		}
		peak := d.Backend.Stats().Peak - v.WeightBytes()
		log.Info(fmt.Sprintf("vae decode: %d tiles at %s (%d retries) in %.2f s; activations peak %s (planned %s); %s",
			ds.Tiles, ds.Tiling, ds.Retries, ds.Elapsed.Seconds(), memory.FormatBytes(peak), memory.FormatBytes(planned), d.Backend))
		return writeFrames(cmd, log, "vae decode", px, out, vo)
	})
}

func newVAEEncode() *cobra.Command {
	f := &vaeFlags{}
	var image string
	var resolution int
	var sample bool
	var seed uint64
	cmd := &cobra.Command{
		Use:   "encode --vae DIR --image in.png -o latents.safetensors",
		Short: "Encode an image into latents as FramePack does (× scaling factor)",
		Long: `Encode one image into the latents FramePack starts from: optionally resized and
center-cropped to the nearest bucket of --resolution, mapped to x/127.5 − 1, encoded, the
posterior's mode taken (--sample draws from it with --seed, as torch.randn does), and
multiplied by the scaling factor, each step rounded to the compute dtype as FramePack's
vae_encode computes in the VAE's. Written as the tensor "latents" (1, 16, 1, H/8, W/8).
With a Wan VAE (config.json's _class_name AutoencoderKLWan) the latents are normalized as Wan's
pipelines keep them instead: (z − latents_mean)/latents_std.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			if image == "" {
				return usagef("--image is required")
			}
			if resolution < 0 {
				return usagef("--resolution %d: want a positive size (or 0 to keep the image's)", resolution)
			}
			if err := checkFileOutput(f.out); err != nil {
				return err
			}
			out := videoOutput{requested: f.out, path: filepath.Clean(f.out)}
			if err := checkNotInput(out, false, []input{{"--image", image}, {"--vae", f.vaeDir}}); err != nil {
				return err
			}
			im, err := section.LoadImage(image)
			if err != nil {
				return usage(err)
			}
			if resolution > 0 {
				if im, err = section.CropToBucket(im, resolution); err != nil {
					return usage(err)
				}
			}
			if im.W%8 != 0 || im.H%8 != 0 {
				return usagef("%s: %dx%d pixels; the VAE needs multiples of 8 (use --resolution)", image, im.W, im.H)
			}
			return runVAEEncode(f, im, sample, seed)
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&image, "image", "", "image file (PNG, JPEG)")
	fl.IntVar(&resolution, "resolution", 0, "resize and crop to the nearest bucket of this resolution (FramePack: 640); 0 keeps the size")
	fl.BoolVar(&sample, "sample", false, "sample the posterior instead of taking its mode")
	fl.Uint64Var(&seed, "seed", 0, "seed of --sample's noise")
	return cmd
}

func runVAEEncode(f *vaeFlags, im *section.RGB, sample bool, seed uint64) error {
	if class, err := vaeClass(f.vaeDir); err != nil {
		return err
	} else if class == wan.ClassName {
		return runWanEncode(f, im, sample, seed)
	}
	log := slog.Default()
	return withVAE(f, log, "vae", vae.Load, vae.Options{NoDecoder: true}, func(d *device.Device, v *vae.VAE) error {
		log.Info(fmt.Sprintf("vae encode: %dx%d image → latents (1, %d, 1, %d, %d)", im.W, im.H, v.Config().LatentChannels,
			im.H/v.Config().SpatialCompressionRatio, im.W/v.Config().SpatialCompressionRatio))
		start := time.Now()
		d.Backend.ResetPeak()
		s := tensor.NewScope(d.Backend)
		defer s.Close()
		var rng vae.Randn // nil: the posterior's mode
		if sample {
			rng = sampler.NewTorchGenerator(seed)
		}
		var out *tensor.Tensor
		err := tensor.Catch(func() { out = section.VAEEncode(s, v, im, vae.DefaultTiling(), rng) })
		if err != nil {
			return fmt.Errorf("vae encode: %w", err)
		}
		if err := encodedFinite(f.vaeDir, out); err != nil {
			return err
		}
		return saveLatents(log, "vae encode", d, start, v.WeightBytes(), f.out, out)
	})
}
