package framepack

import (
	"fmt"
	"math"
	"strings"

	"github.com/framepack-go/framepack/internal/device"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/weights"
)

// BudgetError is a memory budget below the least the models need under
// the smallest plan the engine has for them: Load refuses it before any
// model is read, naming that least and what makes it up.
type BudgetError struct {
	// Flag is the setting to raise: "--vram-limit" (the device's cap) or
	// "--ram-limit" (the host budget).
	Flag string
	// Value is the flag as given ("" when the budget is the default).
	Value string
	// Have is the budget; Need the least that would run; Total what the
	// device (--vram-limit) or the machine (--ram-limit) has, 0 if unknown.
	Have, Need, Total int64
	// Device is the compute device's name.
	Device string
	// Why lists what the least is made of.
	Why string
}

func (e *BudgetError) Error() string {
	what := "the device's cap"
	if e.Flag == "--ram-limit" {
		what = "the host budget"
	}
	have, need := memory.FormatBytes(e.Have), memory.FormatBytes(e.Need)
	if have == need { // a near miss: the bytes tell them apart
		have, need = fmt.Sprintf("%d bytes", e.Have), fmt.Sprintf("%d bytes", e.Need)
	}
	given := fmt.Sprintf("%s %s (%s)", e.Flag, e.Value, have)
	if e.Value == "" {
		given = fmt.Sprintf("%s of %s (the default; %s sets it)", what, have, e.Flag)
	}
	advice := fmt.Sprintf("give %s %s or more", e.Flag, sizeFlag(e.Need))
	if e.Total > 0 && e.Need > e.Total {
		advice = fmt.Sprintf("that is more than the %s there is, so these models cannot run here", memory.FormatBytes(e.Total))
	}
	return fmt.Sprintf("%s is below the %s the smallest run of these models needs on %s: %s; %s",
		given, need, e.Device, e.Why, advice)
}

// sizeFlag writes n as a size flag, rounded up to a tenth of a GiB (whole
// MiB below 1 GiB).
func sizeFlag(n int64) string {
	if n < memory.GiB {
		return fmt.Sprintf("%dM", (n+memory.MiB-1)/memory.MiB)
	}
	return fmt.Sprintf("%.1fG", math.Ceil(float64(n)/float64(memory.GiB)*10)/10)
}

// need is what one stage must hold at once, with what it is.
type need struct {
	bytes int64
	what  string
}

// computeRoom is the room to compute a model is planned with beside its
// weights, as placeFor plans the encoders: an eighth of its weights, and
// 256 MiB more on a GPU (the libraries' workspaces).
func (p *Pipeline) computeRoom(weights int64) int64 {
	if p.gpu {
		return weights/8 + 256*memory.MiB
	}
	return weights / 8
}

// leastTokens bounds the transformer's joint sequence in the smallest job:
// FramePack's 512 text tokens and the smallest bucket's image tokens (one
// latent frame of 64-pixel video, and the history's).
const leastTokens = section.TextLength + 128

// sampleRoom is the room to sample the smallest job in: the transformer's
// activations for it (hunyuan.ActivationBytes), and 256 MiB more on a GPU
// (the libraries' workspaces).
func (p *Pipeline) sampleRoom() int64 {
	n := hunyuan.ActivationBytes(p.trCfg, leastTokens, p.dt.transformer)
	if p.gpu {
		n += 256 * memory.MiB
	}
	return n
}

// leastDevice is the most that a stage of the smallest plan holds on the
// compute device at once, and what it is: on a GPU the transformer with
// every block streamed (its global weights and two blocks) and the VAE
// decoder with its smallest tiling, the encoders running on the host CPU
// when the device lacks room for them; on the CPU every model, each loaded
// for its stage only, the transformer whole.
func (p *Pipeline) leastDevice() (need, error) {
	var stages []need
	add := func(bytes int64, format string, args ...any) {
		stages = append(stages, need{bytes, fmt.Sprintf(format, args...)})
	}
	f := memory.FormatBytes
	tensorOpts := hunyuan.Options{DType: p.dt.transformer, FP8: p.opts.FP8Weights}
	if p.gpu {
		global, block, err := hunyuan.StreamBytes(p.trCfg, tensorOpts)
		if err != nil {
			return need{}, err
		}
		add(global+2*block+p.sampleRoom(), "sampling holds the transformer's %s of global weights, two of its %s blocks streamed, and %s to compute",
			f(global), f(block), f(p.sampleRoom()))
	} else {
		w := p.bytes[PartTransformer]
		add(w+p.sampleRoom(), "sampling holds the transformer's %s of weights and %s to compute", f(w), f(p.sampleRoom()))
		for _, part := range []string{PartTextEncoder, PartTextEncoder2, PartImageEncoder} {
			w := p.bytes[part]
			add(w+p.computeRoom(w), "the %s holds %s of weights and %s to compute", part, f(w), f(p.computeRoom(w)))
		}
	}
	dec, err := p.vaeDecoderBytes()
	if err != nil {
		return need{}, err
	}
	if !p.gpu {
		enc := p.bytes[PartVAE] - dec
		add(enc+p.computeRoom(enc), "the VAE encoder holds %s of weights and %s to compute", f(enc), f(p.computeRoom(enc)))
	}
	// The smallest video's first section (two latent frames of the
	// smallest bucket) at the smallest tiling, whose tiles bound the peak
	// of any larger one.
	_, peak := vae.PlanDecode(p.vaeCfg, []int{1, p.vaeCfg.LatentChannels, 2, 8, 8}, 0, p.dt.vae)
	var scratch int64
	if p.gpu {
		scratch = device.ConvScratch
	}
	what := fmt.Sprintf("decoding holds the VAE decoder's %s of weights and %s for its smallest tiles", f(dec), f(peak))
	if scratch > 0 {
		what += fmt.Sprintf(", beside the %s the conv3d chain keeps", f(scratch))
	}
	add(dec+peak+scratch, "%s", what)

	most := stages[0]
	for _, s := range stages[1:] {
		if s.bytes > most.bytes {
			most = s
		}
	}
	return most, nil
}

// vaeDecoderBytes is the size of the VAE decoder's weights (post_quant_conv
// and decoder.*) in its compute dtype.
func (p *Pipeline) vaeDecoderBytes() (int64, error) {
	specs, err := vae.Plan(p.vaeCfg)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, s := range specs {
		if strings.HasPrefix(s.Name, "decoder.") || strings.HasPrefix(s.Name, "post_quant_conv.") {
			n += s.Numel() * int64(p.dt.vae.Size())
		}
	}
	return n, nil
}

// leastHost is the host memory the smallest plan needs on a discrete GPU
// whose cap is devCap: an encoder that does not fit the device runs on the
// host CPU (its weights and room to compute, one at a time), and every
// load goes through its staging buffers.
func (p *Pipeline) leastHost(devCap int64) need {
	staging := weights.LoadOptions{}.HostBytes()
	most := need{staging, fmt.Sprintf("loading a model goes through %s of staging buffers", memory.FormatBytes(staging))}
	for _, part := range []string{PartTextEncoder, PartTextEncoder2, PartImageEncoder, PartVAE} {
		w := p.bytes[part]
		if w+w/8+256*memory.MiB <= devCap { // placeFor puts it on the device
			continue
		}
		if n := w + w/8; n > most.bytes {
			most = need{n, fmt.Sprintf("the %s runs on the host CPU, as the %s device cap cannot hold it: %s of weights and %s to compute",
				part, memory.FormatBytes(devCap), memory.FormatBytes(w), memory.FormatBytes(w/8))}
		}
	}
	return most
}

// checkBudgets refuses a device cap or host budget below the least the
// smallest plan needs (see leastDevice, leastHost), before any model is
// read. Where the device's memory is the host's (the CPU, an integrated
// GPU), the host budget bounds the device's cap too, and the flag named
// is the one that set the cap.
func (p *Pipeline) checkBudgets() error {
	dev, err := p.leastDevice()
	if err != nil {
		return err
	}
	b := p.be.Budget()
	name := p.dev.Name
	hostTotal := p.ram.Stats().Total
	if b.Cap < dev.bytes {
		flag, value, total := "--vram-limit", p.opts.VRAMLimit.String(), b.Total
		if lim := p.ram.Limit(); p.ram.Unified() && lim > 0 && lim <= b.Cap {
			flag, value, total = "--ram-limit", p.opts.RAMLimit.String(), hostTotal
		}
		return &BudgetError{Flag: flag, Value: value, Have: b.Cap, Need: dev.bytes, Total: total, Device: name, Why: dev.what}
	}
	if !p.gpu || p.ram.Unified() {
		return nil // one pool: the cap's check covers it
	}
	if lim := p.ram.Limit(); lim > 0 {
		if host := p.leastHost(b.Cap); lim < host.bytes {
			return &BudgetError{Flag: "--ram-limit", Value: p.opts.RAMLimit.String(), Have: lim, Need: host.bytes, Total: hostTotal, Device: name, Why: host.what}
		}
	}
	return nil
}
