// A camera frame into a tensor: input 0 is the frame's RGBA8 texture read as an (H, W, 4) tensor
// (bridge.js imageTexture; bytes / 255 by the texture unit), the output its (1, H, W, 3) RGB.
float value(int i) { return x0((i / 3) * 4 + i % 3); }
