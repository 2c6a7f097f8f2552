package dynlib

import "fmt"

// Vendor is a GPU platform and the family of libraries that goes with it:
// the HIP runtime, rocBLAS and MIOpen on AMD; the CUDA driver, cuBLAS and
// cuDNN on NVIDIA. hip, rocblas and miopen share this one type.
type Vendor int

const (
	AMD    Vendor = 1
	NVIDIA Vendor = 2
)

func (v Vendor) String() string {
	switch v {
	case AMD:
		return "AMD"
	case NVIDIA:
		return "NVIDIA"
	}
	return fmt.Sprintf("vendor(%d)", int(v))
}
