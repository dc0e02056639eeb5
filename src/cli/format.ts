/** The CLI's rendering helpers live in `src/timeline/format.ts`, shared with `turnlog ui`. */
export * from '../timeline/format.js';
