// What other areas may import of the images area (the doctor's image_store check).
export { imageObjectStore } from './image-object-store.js';
export { ObjectStoreUnavailable, type ObjectStore } from './object-store.js';
