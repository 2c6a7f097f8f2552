package tensor

import "fmt"

// DType is the element type of a tensor's storage.
type DType uint8

const (
	Invalid DType = iota
	F32
	F16
	BF16
	I64
	I32
	U8
	Bool
	F64    // host-side reference math only; no backend computes in it
	F8E4M3 // FP8 E4M3 ("e4m3fn"), a weight storage type (fp8.go)
)

var dtypeInfo = [...]struct {
	name string
	size int
}{
	Invalid: {"invalid", 0},
	F32:     {"f32", 4},
	F16:     {"f16", 2},
	BF16:    {"bf16", 2},
	I64:     {"i64", 8},
	I32:     {"i32", 4},
	U8:      {"u8", 1},
	Bool:    {"bool", 1},
	F64:     {"f64", 8},
	F8E4M3:  {"f8e4m3", 1},
}

// Size is the size of one element in bytes.
func (d DType) Size() int {
	if int(d) >= len(dtypeInfo) {
		return 0
	}
	return dtypeInfo[d].size
}

func (d DType) String() string {
	if int(d) >= len(dtypeInfo) {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}

// IsFloat reports whether d is a floating-point type that ops compute in.
func (d DType) IsFloat() bool { return d == F32 || d == F16 || d == BF16 || d == F64 }

// ParseDType maps the names used on the command line and in configs ("f32",
// "float32", "fp16", "bfloat16", ...) to a DType.
func ParseDType(s string) (DType, error) {
	switch s {
	case "f32", "fp32", "float32", "F32":
		return F32, nil
	case "f16", "fp16", "float16", "half", "F16":
		return F16, nil
	case "bf16", "bfloat16", "BF16":
		return BF16, nil
	}
	return Invalid, fmt.Errorf("unknown compute dtype %q (want f32, f16 or bf16)", s)
}
