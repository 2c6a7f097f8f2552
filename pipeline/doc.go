// Package pipeline holds the pieces of FramePack's image-to-video loop:
// input images (loading, bucket choice, Pillow-exact LANCZOS resize and
// centre crop, the SigLIP and VAE inputs), the section plan with its index
// layout and history latents, one section's sampling with the packed
// transformer, the latent preview and the soft append of decoded sections.
package pipeline
