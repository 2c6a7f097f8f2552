// Package sampler is FramePack's sampling: PyTorch-compatible noise
// (TorchGenerator reproduces torch.randn on a seeded CPU generator bit for
// bit), the flux time-shift sigma schedule, the model wrapper that turns a
// velocity model into an x0 predictor with real CFG, CFG rescale and
// distilled guidance (fm_wrapper), and flow-matching UniPC bh1 up to order 3
// (uni_pc_fm). It knows nothing of any particular model: a Model is anything
// that predicts a velocity, and all tensor work runs on the scope's backend.
package sampler
