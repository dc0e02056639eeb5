// `turnlog/workflow`: what a workflows module needs, and nothing that loads the engine, the
// store or protobuf. Process workers import the workflows module, so this keeps cold starts small.
export { defineWorkflow, DEFAULT_RETRY } from './define-workflow.js';
export type { Workflow, WorkflowOptions, TurnHandler, TurnReturn, PayloadTypesCheck } from './define-workflow.js';
export type { TurnContext, StepFn, StepOptions, Suspension, ExitForRecovery, CancelKind, StartChildOptions, ChildHandle, WaitOptions, WaitResult } from './context.js';
export type { Json, JsonValue, NotJson, PayloadMode, Payloadable } from './json.js';
export { TerminalError, RetryAfterError, isTurnlogError, ChildFailedError } from '../errors.js';
