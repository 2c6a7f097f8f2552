package tensor

// NoKernels is every compute op of Backend, and Sync, doing nothing: the
// kernels of a backend that only accounts for memory (a planner's dry run,
// a simulated device), which embeds it and adds Name and the memory
// methods. It offers no optional capability.
type NoKernels struct{}

func (NoKernels) Sync() error                                                    { return nil }
func (NoKernels) Fill(*Tensor, float64) error                                    { return nil }
func (NoKernels) Cast(_, _ *Tensor) error                                        { return nil }
func (NoKernels) Copy(*Tensor, int, []int, *Tensor, int, []int, []int) error     { return nil }
func (NoKernels) Unary(UnaryOp, *Tensor, *Tensor, float32, float32) error        { return nil }
func (NoKernels) Binary(BinaryOp, *Tensor, *Tensor, []int, *Tensor, []int) error { return nil }
func (NoKernels) MatMul(_, _, _ *Tensor, _ MatMulParams) error                   { return nil }
func (NoKernels) Linear(_, _, _, _ *Tensor) error                                { return nil }
func (NoKernels) Conv3d(_, _, _, _ *Tensor, _ ConvParams) error                  { return nil }
func (NoKernels) GroupNorm(_, _, _, _ *Tensor, _ int, _ float32, _ bool) error   { return nil }
func (NoKernels) LayerNorm(_, _, _, _ *Tensor, _ float32) error                  { return nil }
func (NoKernels) RMSNorm(_, _, _ *Tensor, _ float32) error                       { return nil }
func (NoKernels) Softmax(_, _ *Tensor) error                                     { return nil }
func (NoKernels) Attention(_, _, _, _ *Tensor, _ AttnParams) error               { return nil }
func (NoKernels) RoPE(_, _, _, _ *Tensor) error                                  { return nil }
func (NoKernels) Reduce(ReduceOp, *Tensor, *Tensor) error                        { return nil }
func (NoKernels) Pad(_, _ *Tensor, _ []int, _ PadMode) error                     { return nil }
func (NoKernels) UpsampleNearest(_, _ *Tensor, _ [3]int) error                   { return nil }
func (NoKernels) AvgPool3d(_, _ *Tensor, _ [3]int) error                         { return nil }
func (NoKernels) Embedding(_, _, _ *Tensor) error                                { return nil }
