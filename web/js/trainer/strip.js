// One class's thumbnail strip: a page of SLOTS thumbnails (the newest first), the range shown,
// and buttons to browse older ones; clicking a thumbnail deletes that sample. The strip has
// SLOTS canvases whatever the class holds, so a new sample redraws at most SLOTS of them and the
// page's DOM does not grow with the collection.
import { SAMPLE_SIZE } from "./frames.js";

export const SLOTS = 12;

function thumbButton() {
  const node = document.createElement("button");
  node.type = "button";
  node.className = "thumb";
  node.title = "Delete this sample";
  return node;
}

export class SampleStrip {
  // root: the card's .strip element (index.html's class template); store: the SampleStore; name(): the class's name;
  // onDelete(seq): deletes a sample (the strip is refreshed after).
  constructor(root, classId, store, name, onDelete) {
    Object.assign(this, { root, classId, store, name, onDelete });
    this.offset = 0; // samples between the newest and the first one shown
    this.shown = []; // [{seq, rgba}] on screen, newest first
    this.list = root.querySelector(".thumbs");
    this.range = root.querySelector(".strip-range");
    this.older = root.querySelector(".strip-older");
    this.newer = root.querySelector(".strip-newer");
    this.newest = root.querySelector(".strip-newest");
    this.older.addEventListener("click", () => this.show(this.offset + SLOTS));
    this.newer.addEventListener("click", () => this.show(Math.max(0, this.offset - SLOTS)));
    this.newest.addEventListener("click", () => this.show(0));
    this.slots = [];
  }

  slot(index) {
    while (this.slots.length <= index) {
      const item = document.createElement("li");
      const thumb = thumbButton();
      const canvas = document.createElement("canvas");
      canvas.width = canvas.height = SAMPLE_SIZE;
      canvas.setAttribute("role", "img");
      thumb.append(canvas);
      const position = this.slots.length;
      thumb.addEventListener("click", () => {
        const sample = this.shown[position];
        if (sample) this.onDelete(sample.seq);
      });
      item.append(thumb);
      this.list.append(item);
      this.slots.push({ item, thumb, canvas, context: canvas.getContext("2d") });
    }
    return this.slots[index];
  }

  // A sample just added: drawn in front when the newest are shown, else the view keeps showing
  // the same samples (one more sits before them).
  added(seq, rgba) {
    if (this.offset === 0) {
      this.shown.unshift({ seq, rgba });
      if (this.shown.length > SLOTS) this.shown.pop();
      this.draw();
    } else {
      this.offset += 1;
      this.caption();
    }
  }

  // Reads and draws the page starting `offset` samples before the newest.
  async show(offset) {
    const total = this.store.count(this.classId);
    this.offset = Math.max(0, Math.min(offset, Math.max(0, total - 1)));
    const end = total - this.offset;
    const rows = await this.store.slice(this.classId, Math.max(0, end - SLOTS), end);
    this.shown = rows.reverse();
    this.draw();
  }

  draw() {
    const total = this.store.count(this.classId);
    const name = this.name();
    this.shown.forEach((sample, i) => {
      const { item, thumb, canvas, context } = this.slot(i);
      item.hidden = false;
      const number = total - this.offset - i;
      thumb.setAttribute("aria-label", `Delete sample ${number} of ${name}`);
      canvas.setAttribute("aria-label", `Sample ${number} of ${name}`);
      if (sample.rgba) {
        context.putImageData(new ImageData(new Uint8ClampedArray(sample.rgba), SAMPLE_SIZE, SAMPLE_SIZE), 0, 0);
      } else {
        context.clearRect(0, 0, SAMPLE_SIZE, SAMPLE_SIZE); // unreadable (storage went away)
      }
    });
    for (let i = this.shown.length; i < this.slots.length; i += 1) this.slots[i].item.hidden = true;
    this.caption();
  }

  caption() {
    const total = this.store.count(this.classId);
    const shown = Math.min(this.shown.length, SLOTS);
    const first = total - this.offset;
    this.range.textContent =
      total === 0
        ? "No samples yet."
        : `Showing ${(first - shown + 1).toLocaleString("en")}–${first.toLocaleString("en")} of ${total.toLocaleString("en")}` +
          (this.offset === 0 ? " (the newest)" : "");
    this.root.querySelector(".strip-nav").hidden = total <= SLOTS;
    this.older.disabled = first - shown <= 0;
    this.newer.disabled = this.newest.disabled = this.offset === 0;
  }
}
