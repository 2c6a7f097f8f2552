//go:build ignore

// gen draws scene.png, the small start image of the README's first command
// and of the end-to-end tests: go run testdata/images/gen.go
package main

import (
	"image"
	"image/color"
	"image/png"
	"log"
	"math"
	"os"
)

func main() {
	const w, h = 256, 192
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			fx, fy := float64(x)/w, float64(y)/h
			// Sky gradient, a sun, rolling hills and a red kite on a string.
			c := color.NRGBA{uint8(90 + 80*fy), uint8(150 + 60*fy), 235, 255}
			if d := math.Hypot(float64(x)-200, float64(y)-42); d < 18 {
				c = color.NRGBA{255, 220, 90, 255}
			}
			if fy > 0.62+0.06*math.Sin(fx*9) {
				c = color.NRGBA{uint8(60 + 40*fx), uint8(140 - 30*fy), 60, 255}
			}
			if dx, dy := math.Abs(fx-0.35), math.Abs(fy-0.3); dx/0.06+dy/0.1 < 1 {
				c = color.NRGBA{220, 40, 50, 255}
			}
			if fy > 0.4 && fy < 0.75 && math.Abs(fx-(0.35+(fy-0.4)*0.4)) < 0.004 {
				c = color.NRGBA{40, 40, 40, 255}
			}
			img.SetNRGBA(x, y, c)
		}
	}
	f, err := os.Create("testdata/images/scene.png")
	if err != nil {
		log.Fatal(err)
	}
	if err := png.Encode(f, img); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
}
