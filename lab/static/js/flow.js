// The rollout and offsets card: the attention rollout of the whole model on the sequence and the
// selected head's attention by offset, both drawn by the server (the pictures that download).
import { pictureURL } from './api.js';
import { downloads } from './ui.js';

/** Flow shows the rollout of a run and the offset profile of the selected head. */
export class Flow {
  constructor(root) {
    this.root = root;
    this.rollout = root.querySelector('.rollout-img');
    this.offsets = root.querySelector('.offsets-img');
  }

  /** show draws the pictures of the sequence source, with head (layer, head) selected. */
  show(source, layer, head) {
    const url = pictureURL(source, { kind: 'rollout' });
    this.rollout.src = `${url}&format=svg`;
    this.rollout.alt = `attention rollout of ${source.model} on the sequence`;
    this.root.querySelector('.rollout-downloads').replaceChildren(downloads(url, `${source.model}-rollout`));
    this.select(source, layer, head);
  }

  /** select draws the offset profile of head (layer, head). */
  select(source, layer, head) {
    if (!source) return;
    const url = pictureURL(source, { kind: 'offsets', layer, head });
    this.offsets.src = `${url}&format=svg`;
    this.offsets.alt = `layer ${layer} head ${head}: mean attention by the key's offset from the query`;
    this.root.querySelector('.offsets-title').textContent = `Layer ${layer} · head ${head}: attention by offset`;
    this.root.querySelector('.offsets-downloads').replaceChildren(downloads(url, `${source.model}-L${layer}H${head}-offsets`));
  }
}
