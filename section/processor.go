package section

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/framepack-go/framepack/internal/jsonobj"
)

// siglipProcessor is the part of preprocessor_config.json that SigLIPPixels
// implements.
type siglipProcessor struct {
	Type          string    `json:"image_processor_type"`
	DoResize      *bool     `json:"do_resize"`
	DoRescale     *bool     `json:"do_rescale"`
	DoNormalize   *bool     `json:"do_normalize"`
	Resample      *int      `json:"resample"`
	RescaleFactor *float64  `json:"rescale_factor"`
	ImageMean     []float64 `json:"image_mean"`
	ImageStd      []float64 `json:"image_std"`
	Size          struct {
		Height int `json:"height"`
		Width  int `json:"width"`
	} `json:"size"`
}

// ReadSigLIPProcessor reads dir/preprocessor_config.json (flux_redux_bfl's
// feature_extractor) and returns the side it resizes to, after checking
// that it asks for what SigLIPPixels does: a square bicubic resize, rescale
// by 1/255, normalisation with mean and std 0.5. Absent keys take
// SiglipImageProcessor's defaults (which are those); unused keys are ignored.
func ReadSigLIPProcessor(dir string) (int, error) {
	p := filepath.Join(dir, "preprocessor_config.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("%s does not exist", p)
		}
		return 0, err
	}
	var c siglipProcessor
	if err := jsonobj.Check(raw); err != nil {
		return 0, fmt.Errorf("%s %v", p, err)
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return 0, fmt.Errorf("%s: %v", p, err)
	}
	isFalse := func(b *bool) bool { return b != nil && !*b }
	half := func(v []float64) bool {
		if v == nil {
			return true
		}
		if len(v) != 3 {
			return false
		}
		for _, x := range v {
			if x != 0.5 {
				return false
			}
		}
		return true
	}
	switch {
	case c.Type != "" && c.Type != "SiglipImageProcessor" && c.Type != "SiglipImageProcessorFast":
		return 0, fmt.Errorf("%s: image_processor_type %q is not SiglipImageProcessor", p, c.Type)
	case isFalse(c.DoResize) || isFalse(c.DoRescale) || isFalse(c.DoNormalize):
		return 0, fmt.Errorf("%s: do_resize, do_rescale and do_normalize must be true", p)
	case c.Resample != nil && *c.Resample != 3:
		return 0, fmt.Errorf("%s: resample %d is not supported (3, bicubic)", p, *c.Resample)
	case c.RescaleFactor != nil && math.Abs(*c.RescaleFactor-1.0/255) > 1e-12:
		return 0, fmt.Errorf("%s: rescale_factor %v is not supported (1/255)", p, *c.RescaleFactor)
	case !half(c.ImageMean) || !half(c.ImageStd):
		return 0, fmt.Errorf("%s: image_mean %v and image_std %v are not supported (0.5 each)", p, c.ImageMean, c.ImageStd)
	case c.Size.Height == 0 && c.Size.Width == 0:
		return SigLIPSize, nil
	case c.Size.Height <= 0 || c.Size.Height != c.Size.Width:
		return 0, fmt.Errorf("%s: size %d×%d: want a positive square", p, c.Size.Height, c.Size.Width)
	}
	return c.Size.Height, nil
}
