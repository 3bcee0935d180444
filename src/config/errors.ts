import { AppError } from '../errors/app-error.js';

/**
 * An error the user caused (config, CLI arguments, unreachable servers at start). The CLI
 * prints `message` on one line per problem and exits non-zero, without a stack trace.
 */
export class UserError extends AppError {
  constructor(
    message: string,
    readonly problems: string[] = [message],
  ) {
    super('invalid', 'user_error', message);
  }
}

export class ConfigError extends UserError {
  constructor(problems: string[]) {
    super(problems.length === 1 ? `config error: ${problems[0]}` : `config errors:\n  ${problems.join('\n  ')}`, problems);
  }
}
