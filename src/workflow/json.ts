/**
 * Payload types: what the default payload converter stores faithfully, checked at compile time.
 * Types only (no runtime code), so `turnlog/workflow` stays light. See docs/workflows.md#payloads-are-json.
 */

/** A JSON value: the data the default payload converter stores faithfully. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue | undefined };

/**
 * `T` when the default converter stores every value of type `T` faithfully; otherwise `T` with
 * each offending part replaced by {@link NotJson}, so `T` is not assignable to it and the compiler
 * points at the part. Unlike {@link JsonValue} it accepts interfaces without index signatures.
 * Top level: `undefined`/`void` and a whole `Uint8Array` pass; `unknown` and `any` pass (checked at run time).
 */
export type Json<T> = unknown extends T ? T : T extends Uint8Array | undefined | void ? T : JsonData<T>;

/** Nested data: no functions or class instances with methods (Date, Map, Set), no BigInt, symbols or binary, no undefined in arrays. */
type JsonData<T> = unknown extends T
  ? T
  : T extends JsonValue // also ends the recursion on JsonValue itself
    ? T
    : T extends bigint | symbol | ((...args: never[]) => unknown) | ArrayBufferView | ArrayBuffer | Date | ReadonlyMap<unknown, unknown> | ReadonlySet<unknown> | RegExp | Promise<unknown>
      ? NotJson
      : T extends readonly unknown[]
        ? JsonArray<T>
        : T extends object
          ? { [K in keyof T]: T[K] extends undefined ? T[K] : JsonData<Exclude<T[K], undefined>> | Extract<T[K], undefined> }
          : NotJson;

/** Elements (a separate alias so tuples and arrays map to tuples and arrays). */
type JsonArray<A extends readonly unknown[]> = { [K in keyof A]: unknown extends A[K] ? A[K] : undefined extends A[K] ? NotJson : JsonData<A[K]> };

declare const NOT_JSON: unique symbol;
/** Stands where a type has a part that is not JSON; nothing is assignable to it. */
export interface NotJson {
  readonly [NOT_JSON]: 'not JSON: use plain objects, arrays, strings, finite numbers, booleans, null (docs/workflows.md#payloads-are-json)';
}

/** How a workflow's payloads are converted: `json` (the default converter) or `custom` (`EngineOptions.payloadConverter`). */
export type PayloadMode = 'json' | 'custom';

/** `T` as mode `P` requires it: {@link Json} for `json`, anything for `custom`. */
export type Payloadable<T, P extends PayloadMode> = P extends 'custom' ? T : Json<T>;
