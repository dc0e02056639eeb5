/**
 * Fault injection for crash tests: `TURNLOG_FAULT_KILL_AFTER_APPEND=N` SIGKILLs this process
 * right after its N-th successful append. Free when unset (the injector is undefined).
 */
export class FaultInjector {
  #appends = 0;
  readonly #killAfter: number;

  private constructor(killAfter: number) {
    this.#killAfter = killAfter;
  }

  static fromEnv(env: NodeJS.ProcessEnv = process.env): FaultInjector | undefined {
    const raw = env['TURNLOG_FAULT_KILL_AFTER_APPEND'];
    if (!raw) return undefined;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < 1) {
      throw new Error(`TURNLOG_FAULT_KILL_AFTER_APPEND must be a positive integer, got ${JSON.stringify(raw)}.`);
    }
    return new FaultInjector(n);
  }

  afterAppend(): void {
    if (++this.#appends === this.#killAfter) process.kill(process.pid, 'SIGKILL');
  }
}
