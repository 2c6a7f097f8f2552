package hunyuan

import (
	"fmt"
	"path/filepath"

	"github.com/framepack-go/framepack/lora"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Options configure Load and RandomModel.
type Options struct {
	// DType is the weight and compute dtype (F32, BF16 or F16); Invalid
	// means F32. proj_out is always kept in f32 (rounded through DType).
	DType tensor.DType
	// HostBlocks keeps the weights of the double and single blocks in host
	// memory (page-locked when the backend has it) and streams them: each
	// block's weights are copied to the backend in one transfer before the
	// block runs and freed after it, the next block's copy overlapping the
	// current block's compute where the backend can (a second stream) and
	// the budget has room. The backend then holds at most two blocks'
	// weights beside the rest of the model, plus KeepBlockBytes. On a
	// host-backed backend (the CPU) nothing is copied.
	HostBlocks bool
	// KeepBlockBytes, under HostBlocks, keeps the first blocks resident on
	// the backend up to this many bytes of their weights; AutoKeep keeps
	// what the backend's memory budget (a memory.Backend) allows beside its
	// preserved amount once the rest of the model is loaded.
	KeepBlockBytes int64
	// StreamFromFile, under HostBlocks and on a backend that is not host
	// memory, keeps no host copy of the streamed blocks: each one is read
	// from the memory-mapped checkpoint when the forward pass reaches it
	// (the next one's pages read ahead), uploaded, and its pages released.
	// Host memory then holds about one block instead of every streamed
	// one, at the price of reading the file on every pass. Load only (a
	// model without a file streams from host memory).
	StreamFromFile bool
	// LoRA is merged into the weights as they are built (package lora):
	// resident weights and the host copies of streamed blocks alike. Blocks
	// it changes are never streamed from the file (StreamFromFile keeps a
	// host copy of them instead). With FP8, the FP8 linears' LoRAs are not
	// merged but added at run time from resident low-rank factors, and do
	// not keep a block from streaming. Load only.
	LoRA *lora.Set
	// FP8 holds the blocks' linear weights (all but the modulations) as
	// FP8 E4M3 with one scale per output channel: stored so in the
	// checkpoint, or quantized at load. They are dequantized on the fly
	// (weight-only), on every backend, unless FP8Compute.
	FP8 bool
	// FP8Compute, with FP8, quantizes the inputs of those linears per
	// token too and multiplies in FP8 (Scope.LinearFP8Compute): FP8 tensor
	// cores where tensor.NativeFP8 holds, the CPU as its reference.
	FP8Compute bool
	// FP8Attention lets the blocks' attention run in FP8 where the device
	// has an engine for it (tensor.AttnParams.FP8).
	FP8Attention bool
}

// AutoKeep as Options.KeepBlockBytes sizes the resident blocks from the
// backend's budget.
const AutoKeep = -1

// Model is a loaded packed HunyuanVideo transformer. Forward may be called
// from one goroutine at a time (TeaCache keeps state between calls).
type Model struct {
	cfg  Config
	be   tensor.Backend
	dt   tensor.DType
	opts Options

	xEmbedder      patchConv // x_embedder.proj
	cleanXEmbedder struct {  // clean_x_embedder.*
		Proj, Proj2x, Proj4x patchConv
	}
	contextEmbedder tokenRefiner
	timeTextEmbed   timeGuidanceTextEmbed
	imageProjection clipVisionProjection
	blocks          []doubleBlock             // transformer_blocks.N
	singleBlocks    []singleBlock             // single_transformer_blocks.N
	arenas          []*arena                  // the weights of every block, double blocks first
	file            *weights.CheckpointSource // the open checkpoint, while blocks stream from it
	normOut         linear                    // norm_out.linear
	projOut         linear                    // f32
	global          *weights.Builder          // holds every weight outside the blocks
	lowRank         map[string]*lowRank       // FP8 linears' LoRAs, by linear.key
	lowRankScope    *tensor.Scope             // holds them

	tc   teaCache
	rope struct { // the last call's RoPE tables
		key      string
		cos, sin *tensor.Tensor
	}
	mc magCache
	// Calls since the caches were last reset, and those that skipped.
	calls int
	skips []int
	state *tensor.Scope // owns what is kept between calls (TeaCache, RoPE)
	sp    tensor.Comm   // the sequence-parallel group, or nil
}

// Config is the model's configuration.
func (m *Model) Config() Config { return m.cfg }

// DType is the compute dtype.
func (m *Model) DType() tensor.DType { return m.dt }

// Backend is the backend the model computes on.
func (m *Model) Backend() tensor.Backend { return m.be }

func newModel(cfg Config, be tensor.Backend, opts Options) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.DType == tensor.Invalid {
		opts.DType = tensor.F32
	}
	switch opts.DType {
	case tensor.F32, tensor.BF16, tensor.F16:
	default:
		return nil, fmt.Errorf("compute dtype %s: want f32, bf16 or f16", opts.DType)
	}
	m := &Model{cfg: cfg, be: be, dt: opts.DType, opts: opts, state: tensor.NewScope(be)}
	m.blocks = make([]doubleBlock, cfg.NumLayers)
	m.singleBlocks = make([]singleBlock, cfg.NumSingleLayers)
	return m, nil
}

// loadGlobals reads every weight outside the blocks through p, in
// checkpoint names. proj_out and the timestep, guidance and pooled-text
// embedders (time_text_embed, also the token refiner's) are kept in f32
// whatever the compute dtype, holding the values the compute dtype rounds
// them to: proj_out as FramePack's high_quality_fp32_output_for_inference;
// the embedders so that the timestep sinusoids (arguments up to 10⁴) reach
// their MLPs unrounded: the reference's bf16 cast there puts about 5e-3 of
// relative error into temb, which every modulation carries. These are M = 1
// GEMMs of ~80 M weights: f32 costs no measurable time.
func (m *Model) loadGlobals(p *weights.Builder) {
	cfg, d := m.cfg, m.cfg.Inner()
	m.xEmbedder.load(p.Sub("x_embedder"), "proj", d, cfg.InChannels, [3]int{cfg.PatchSizeT, cfg.PatchSize, cfg.PatchSize})
	if cfg.HasCleanXEmbedder {
		c := p.Sub("clean_x_embedder")
		m.cleanXEmbedder.Proj.load(c, "proj", d, 16, [3]int{1, 2, 2})
		m.cleanXEmbedder.Proj2x.load(c, "proj_2x", d, 16, [3]int{2, 4, 4})
		m.cleanXEmbedder.Proj4x.load(c, "proj_4x", d, 16, [3]int{4, 8, 8})
	}
	m.contextEmbedder.load(p.Sub("context_embedder"), cfg)
	m.timeTextEmbed.load(p.Sub("time_text_embed").F32(), d, cfg.PooledProjectionDim)
	if cfg.HasImageProj {
		m.imageProjection.load(p.Sub("image_projection"), cfg.ImageProjDim, d)
	}
	m.normOut.load(p, "norm_out.linear", 2*d, d)
	m.projOut.load(p.F32(), "proj_out", cfg.PatchSizeT*cfg.PatchSize*cfg.PatchSize*cfg.OutChannels, d)
}

// Load reads a HunyuanVideoTransformer3DModelPacked folder (config.json and
// safetensors, one file or sharded with an index) onto be. A missing or
// misshapen weight fails with an error naming the file, the tensor and the
// shapes.
func Load(dir string, be tensor.Backend, opts Options) (*Model, error) {
	ck, err := weights.Open(dir)
	if err != nil {
		return nil, err
	}
	cfg, err := ReadConfig(ck.Dir())
	if err != nil {
		ck.Close()
		return nil, err
	}
	m, err := newModel(cfg, be, opts)
	if err != nil {
		ck.Close()
		return nil, fmt.Errorf("hunyuan: %s: %w", dir, err)
	}
	src := &weights.CheckpointSource{Ck: ck, Be: be}
	m.file = src
	var fill weights.Filler = src
	if opts.LoRA.Len() > 0 {
		fill = &lora.Source{Inner: src, Be: be, Set: opts.LoRA}
	}
	if err := m.loadLowRank(); err != nil {
		m.Close()
		return nil, fmt.Errorf("hunyuan: %s: %w", dir, err)
	}
	if err := m.build(fill); err != nil {
		m.Close()
		return nil, err
	}
	if !m.fromFile() {
		// Every weight is copied: the mapping is no longer needed.
		m.file = nil
		ck.Close()
	}
	return m, nil
}

// build makes every weight from src, read in parallel by one Loader: the
// global ones each in its own allocation (loaded ahead of loadGlobals'
// requests from a plan of them), the blocks' in their arenas.
func (m *Model) build(src weights.Filler) error {
	ld := weights.NewLoader(src, m.be, weights.LoadOptions{})
	defer ld.Finish() // before any weight is freed: no copy runs into freed memory
	plan := weights.NewPlan().In(m.dt)
	(&Model{cfg: m.cfg, dt: m.dt, opts: m.opts}).loadGlobals(plan)
	pf := weights.NewPrefetch(ld, src, m.be, plan.Weights(), 0)
	m.global = weights.NewBuilder(pf, m.dt)
	m.loadGlobals(m.global)
	pf.Close()
	if err := m.global.Err(); err != nil {
		return err
	}
	if err := m.makeBlocks(src, ld); err != nil {
		return err
	}
	return ld.Finish()
}

// ReadConfig reads and checks dir/config.json as Load does: absent keys
// take DefaultConfig's values; keys the model does not use (_class_name,
// _diffusers_version, ...) are ignored.
func ReadConfig(dir string) (Config, error) {
	cfg := DefaultConfig()
	if err := weights.ReadConfig(dir, &cfg); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("hunyuan: %s: %w", filepath.Join(dir, "config.json"), err)
	}
	return cfg, nil
}

// Plan lists the checkpoint tensors a model of config cfg reads (names and
// shapes; a fused projection appears as its parts) without loading
// anything.
func Plan(cfg Config) ([]weights.Spec, error) {
	p, err := plan(cfg, Options{})
	if err != nil {
		return nil, err
	}
	return p.Specs(), nil
}

// WeightBytes is the size of the weights as a model of cfg loaded with
// opts holds them (opts.DType; the block linears as codes and scales with
// opts.FP8), for planning memory before loading.
func WeightBytes(cfg Config, opts Options) (int64, error) {
	p, err := plan(cfg, opts)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, w := range p.Weights() {
		n += int64(tensor.Numel(w.Shape)) * int64(w.DType.Size())
	}
	return n, nil
}

// StreamBytes is what a model of cfg loaded with opts holds on its backend
// at least, with every block streamed (Options.HostBlocks, nothing kept):
// its global weights, and the largest block's weights, of which a forward
// holds two at once (the block computing and the next one's copy). For
// planning memory before loading.
func StreamBytes(cfg Config, opts Options) (global, block int64, err error) {
	if err := cfg.Validate(); err != nil {
		return 0, 0, err
	}
	m := &Model{cfg: cfg, opts: opts, dt: opts.DType, blocks: make([]doubleBlock, cfg.NumLayers), singleBlocks: make([]singleBlock, cfg.NumSingleLayers)}
	g := weights.NewPlanIn(opts.DType)
	m.loadGlobals(g)
	for _, w := range g.Weights() {
		global += int64(tensor.Numel(w.Shape)) * int64(w.DType.Size())
	}
	for i := range m.numBlocks() {
		p := weights.NewPlanIn(opts.DType)
		m.loadBlock(p, i, m.block(i))
		block = max(block, newArena(p.Weights()).size)
	}
	return global, block, nil
}

// ActivationBytes is about the most a block's forward holds at once for a
// joint sequence of tokens (image and text) in dtype dt: its input and
// output, the fused projections' outputs (q, k, v and the MLP's input),
// the attention's output and the MLP's activation and concatenation. For
// planning memory before running.
func ActivationBytes(cfg Config, tokens int, dt tensor.DType) int64 {
	d, m := int64(cfg.Inner()), int64(cfg.MLPDim())
	return int64(tokens) * (7*d + 2*m) * int64(dt.Size())
}

// plan runs the model's constructor on a plan builder.
func plan(cfg Config, opts Options) (*weights.Builder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Model{cfg: cfg, opts: opts, blocks: make([]doubleBlock, cfg.NumLayers), singleBlocks: make([]singleBlock, cfg.NumSingleLayers)}
	p := weights.NewPlanIn(opts.DType)
	m.dt = opts.DType
	m.loadGlobals(p)
	for i := 0; i < m.numBlocks(); i++ {
		m.loadBlock(p, i, m.block(i))
	}
	return p, nil
}

// Close frees every weight and the TeaCache state.
func (m *Model) Close() {
	if m.global != nil {
		m.global.Release()
	}
	if m.lowRankScope != nil {
		m.lowRankScope.Close()
		m.lowRankScope, m.lowRank = nil, nil
	}
	for _, a := range m.arenas {
		if a != nil {
			a.free()
		}
	}
	m.arenas = nil
	clear(m.blocks)
	clear(m.singleBlocks)
	if m.file != nil {
		m.file.Ck.Close()
		m.file = nil
	}
	m.tc, m.mc = teaCache{}, magCache{}
	m.rope.key, m.rope.cos, m.rope.sin = "", nil, nil
	if m.state != nil {
		m.state.Close()
		m.state = nil
	}
}

// WeightTensors is every backend allocation holding weights: the global
// ones and the resident blocks' arenas (streamed blocks hold none between
// uses). For charging them to an owner.
func (m *Model) WeightTensors() []*tensor.Tensor {
	var ts []*tensor.Tensor
	if m.global != nil {
		ts = append(ts, m.global.Held()...)
	}
	for _, a := range m.arenas {
		if a.dev != nil {
			ts = append(ts, a.dev)
		}
	}
	return ts
}

// WeightBytes is the storage of the weights on the backend and on the host.
func (m *Model) WeightBytes() (backend, host int64) {
	if m.global != nil {
		backend = m.global.Bytes()
	}
	for _, a := range m.arenas {
		if a.dev != nil {
			backend += a.size
		}
		if a.host != nil {
			host += a.size
		}
	}
	return backend, host
}

// StreamedBlocks is the number of blocks whose weights stream, from host
// memory or from the mapped checkpoint (the others are resident).
func (m *Model) StreamedBlocks() int {
	n := 0
	for _, a := range m.arenas {
		if a.dev == nil && (a.host != nil || a.mapped) {
			n++
		}
	}
	return n
}

// StreamsFromFile reports whether streamed blocks are read from the mapped
// checkpoint (Options.StreamFromFile) rather than from host memory.
func (m *Model) StreamsFromFile() bool { return m.fromFile() }

func (m *Model) fromFile() bool {
	for _, a := range m.arenas {
		if a.mapped {
			return true
		}
	}
	return false
}

// loadLowRank makes the run-time LoRA factors of the FP8 linears
// (Options.FP8 with Options.LoRA), resident in the compute dtype; the
// blocks' linears find them by name as they are bound.
func (m *Model) loadLowRank() error {
	if !m.opts.FP8 || m.opts.LoRA.Len() == 0 {
		return nil
	}
	p, err := plan(m.cfg, m.opts)
	if err != nil {
		return err
	}
	m.lowRank, m.lowRankScope = map[string]*lowRank{}, tensor.NewScope(m.be)
	return tensor.Catch(func() {
		s := m.lowRankScope
		for _, w := range p.Weights() {
			if w.FP8 != weights.FP8Codes {
				continue
			}
			a, b, r, in, ok := m.opts.LoRA.LowRank(w.Parts)
			if !ok {
				continue
			}
			m.lowRank[w.Parts[0].Name] = &lowRank{
				A: m.residentFactor(s, tensor.FromFloat32(a, r, in)),
				B: m.residentFactor(s, tensor.FromFloat32(b, w.Shape[0], r)),
			}
		}
	})
}

// residentFactor is the host f32 tensor h on the device in the compute
// dtype, held by s.
func (m *Model) residentFactor(s *tensor.Scope, h *tensor.Tensor) *tensor.Tensor {
	f := s.To(h)
	if m.dt == tensor.F32 {
		return f
	}
	c := s.Cast(f, m.dt)
	s.Free(f)
	return c
}
