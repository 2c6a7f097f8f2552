// Package section holds FramePack's own helpers around the models, what
// its diffusers_helper does for demo_gradio.py's worker: the input image
// (loading, bucket choice, Pillow-exact LANCZOS resize and centre crop, the
// SigLIP and VAE inputs), encode_prompt_conds, vae_encode and vae_decode
// (hunyuan.py), the section plan with its index layout and history
// latents, one section's sampling with the packed transformer
// (sample_hunyuan), the latent preview and the soft append of decoded
// sections. The root package's Generate and the CLI's vae commands call
// these, so both encode and decode the same way.
package section
