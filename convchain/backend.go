package convchain

import "github.com/framepack-go/framepack/tensor"

// Backend is a tensor.Backend whose Conv3d goes through a Chain; every
// other kernel is the inner backend's.
type Backend struct {
	tensor.Backend
	chain *Chain
}

// Wrap routes be's Conv3d through c.
func Wrap(be tensor.Backend, c *Chain) *Backend { return &Backend{Backend: be, chain: c} }

// Conv3d runs the convolution through the chain.
func (b *Backend) Conv3d(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	return b.chain.Conv3d(dst, x, w, bias, p)
}

// Conv3dPadded runs Conv3d on x padded by pad, through the chain (see
// Chain.Conv3dPadded).
func (b *Backend) Conv3dPadded(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams, pad tensor.Padding) error {
	return b.chain.conv3dPadded(b.Backend, dst, x, w, bias, p, pad)
}

// Conv3dLast runs a channels-last convolution through the chain (see
// Chain.Conv3dLast).
func (b *Backend) Conv3dLast(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	return b.chain.conv3dLast(b.Backend, dst, x, w, bias, p)
}

// Chain is the chain convolutions go through.
func (b *Backend) Chain() *Chain { return b.chain }

// Unwrap is the inner backend.
func (b *Backend) Unwrap() tensor.Backend { return b.Backend }

// ChainOf finds the conv3d chain in be's layers; nil when there is none.
func ChainOf(be tensor.Backend) *Chain {
	if cb, ok := tensor.As[*Backend](be); ok {
		return cb.Chain()
	}
	return nil
}

// LogSummary logs the chain's one line per tier, when be has a chain.
func LogSummary(be tensor.Backend) {
	if c := ChainOf(be); c != nil {
		c.LogSummary()
	}
}
