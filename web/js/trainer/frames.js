// Camera and pixels on the page: the webcam stream, and frames or images turned into the square
// RGBA samples the trainer keeps (mirrored like the preview, centre-cropped, resized). The engine
// resizes them to the model's input on the device (engine.js sends them as bitmaps).

export const SAMPLE_SIZE = 64; // what is stored per sample; training resizes to the input size

export class Camera {
  constructor(video) {
    this.video = video;
    this.stream = null;
  }

  get live() {
    return this.stream !== null && this.video.videoWidth > 0;
  }

  // Resolves once frames play; rejects with a message a person can act on.
  async start() {
    if (!navigator.mediaDevices?.getUserMedia) {
      throw new Error("This browser offers no camera here (it needs https or localhost). You can still upload images.");
    }
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({
        video: { width: { ideal: 640 }, height: { ideal: 480 }, facingMode: "user" },
        audio: false,
      });
    } catch (error) {
      const denied = error.name === "NotAllowedError" || error.name === "SecurityError";
      const missing = error.name === "NotFoundError" || error.name === "OverconstrainedError";
      throw new Error(
        denied
          ? "Camera permission was denied. Allow the camera in the address bar and press Start camera, or upload images instead."
          : missing
            ? "No camera was found. Connect one and press Start camera, or upload images instead."
            : `The camera could not start (${error.name}: ${error.message}). You can still upload images.`,
      );
    }
    this.video.srcObject = this.stream;
    await this.video.play();
    if (this.video.videoWidth === 0) {
      await new Promise((resolve) => this.video.addEventListener("loadedmetadata", resolve, { once: true }));
    }
  }
}

// A 2D context of a reusable square canvas, with smoothing that gives bilinear resizing.
function squareContext(size) {
  const canvas = new OffscreenCanvas(size, size);
  const context = canvas.getContext("2d", { willReadFrequently: true });
  context.imageSmoothingEnabled = true;
  context.imageSmoothingQuality = "medium";
  return context;
}

const contexts = new Map();
function contextOf(size) {
  if (!contexts.has(size)) contexts.set(size, squareContext(size));
  return contexts.get(size);
}

// The centre square of a width x height source, drawn into size x size (mirrored if asked).
function drawSquare(source, width, height, size, mirror) {
  const context = contextOf(size);
  const side = Math.min(width, height);
  context.setTransform(mirror ? -1 : 1, 0, 0, 1, mirror ? size : 0, 0);
  context.drawImage(source, (width - side) / 2, (height - side) / 2, side, side, 0, 0, size, size);
  context.setTransform(1, 0, 0, 1, 0, 0);
  return context.getImageData(0, 0, size, size).data;
}

// A frame of the (mirrored) preview as `size` x `size` RGBA, as the person sees it.
export function videoFrame(video, size = SAMPLE_SIZE) {
  return drawSquare(video, video.videoWidth, video.videoHeight, size, true);
}

// An uploaded image file as a SAMPLE_SIZE sample (not mirrored: it is shown as it is) and, with
// `side`, its centre square at side x side as an ImageBitmap too ({rgba, square}).
export async function imageFileSample(file, side = null) {
  const bitmap = await createImageBitmap(file);
  try {
    const rgba = drawSquare(bitmap, bitmap.width, bitmap.height, SAMPLE_SIZE, false);
    return { rgba, square: side ? await centreSquare(bitmap, bitmap.width, bitmap.height, side) : null };
  } finally {
    bitmap.close();
  }
}

// The centre square of a width x height source (a video, a bitmap) at side x side, as an
// ImageBitmap: the browser crops and resizes it off the main thread (a pretrained backbone's
// input, from the best pixels there are; not mirrored).
export function centreSquare(source, width, height, side) {
  const square = Math.min(width, height);
  const x = Math.floor((width - square) / 2);
  const y = Math.floor((height - square) / 2);
  return createImageBitmap(source, x, y, square, square, { resizeWidth: side, resizeHeight: side, resizeQuality: "medium" });
}

// A stored sample (SAMPLE_SIZE² RGBA) as an ImageBitmap.
export function sampleBitmap(rgba) {
  return createImageBitmap(new ImageData(rgba, SAMPLE_SIZE, SAMPLE_SIZE));
}

// Stored samples stacked top to bottom on one canvas (side wide, side x count tall), to be sent
// to the engine as one bitmap.
export function stackSamples(samples, side) {
  const canvas = new OffscreenCanvas(side, side * samples.length);
  const context = canvas.getContext("2d");
  samples.forEach((sample, i) => context.putImageData(new ImageData(sample, side, side), 0, i * side));
  return canvas;
}
