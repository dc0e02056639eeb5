/** The store tests' event builders now live in src/testing (the exported contract suite uses them). */
export * from '../../src/testing/store-events.js';
