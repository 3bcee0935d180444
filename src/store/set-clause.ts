/**
 * The SET list of a partial UPDATE: only the fields a patch carries, as numbered parameters
 * after the row id (`$1`).
 */
export class SetClause {
  readonly params: unknown[];
  private readonly parts: string[] = [];

  constructor(id: number) {
    this.params = [id];
  }

  set(column: string, value: unknown): this {
    this.params.push(value);
    this.parts.push(`${column} = $${this.params.length}`);
    return this;
  }

  /** A fixed assignment such as `token_version = token_version + 1`. */
  raw(assignment: string): this {
    this.parts.push(assignment);
    return this;
  }

  get empty(): boolean {
    return this.parts.length === 0;
  }

  toString(): string {
    return [...this.parts, 'updated_at = clock_timestamp()'].join(', ');
  }
}
