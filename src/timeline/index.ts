/** The timeline model shared by `turnlog show` and `turnlog ui` (pure, no I/O). */
export * from './build.js';
export * from './format.js';
export * from './lineage.js';
