import { InvalidArgumentError, Option, type Command } from 'commander';
import type { AreaCommand } from '../../modules/area.js';
import type { CredentialSource } from './credential-files.js';

const URL_HELP = 'the service (default http://127.0.0.1:<http.port>)';
// Written out here (not imported from credential-files.ts): registering the commands loads no code of theirs.
const SOURCES: readonly CredentialSource[] = ['codex', 'claude', 'gemini'];

function positiveInt(value: string): number {
  if (!/^[1-9]\d*$/.test(value)) throw new InvalidArgumentError('expected a positive integer (a proxy id)');
  return Number(value);
}

/** `relay-jobs accounts import|test`: they ask the running service (its admin API), as `backup` does. */
export const accountsCommands: AreaCommand[] = [
  {
    name: 'accounts',
    register: (program: Command, cli) => {
      const accounts = program.command('accounts').description('upstream OAuth accounts: import a CLI login, test an account');
      accounts
        .command('import <file>')
        .description('create an account from the credential file an official CLI wrote (~/.codex/auth.json, ~/.claude/.credentials.json, ~/.gemini/oauth_creds.json)')
        .addOption(new Option('--from <cli>', 'which CLI wrote the file').choices(SOURCES).makeOptionMandatory())
        .option('--name <name>', "the account's name (default: the email in the file, else <platform>-<hash>)")
        .option('--proxy-id <n>', 'the egress proxy the account uses', positiveInt)
        .option('--project-id <project>', 'gemini: the Code Assist project (the file has none)')
        .option('--url <url>', URL_HELP)
        .option('--json', "print the API's JSON")
        .action(async (file: string, opts: { from: CredentialSource; name?: string; proxyId?: number; projectId?: string; url?: string; json?: boolean }, cmd: Command) =>
          (await import('./cli-accounts.js')).importCommand(await cli.config(cmd), file, opts),
        );
      accounts
        .command('test <id>')
        .description('send one test request with the account now and show what was sent, the answer and the effect on the account; exit 0 pass, 1 fail')
        .option('--model <model>', 'the model to ask (default: the platform test model)')
        .option('--url <url>', URL_HELP)
        .option('--json', "print the API's JSON")
        .action(
          async (id: string, opts: { model?: string; url?: string; json?: boolean }, cmd: Command) =>
            void (process.exitCode = await (await import('./cli-accounts.js')).testCommand(await cli.config(cmd), id, opts)),
        );
    },
  },
];
