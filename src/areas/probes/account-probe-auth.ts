import type { Accounts } from '../accounts/index.js';
import { AccountUnavailable, type TokenApi } from '../accounts/index.js';

export interface ProbeAuth {
  token: string;
  proxyUrl: string | null;
}

/**
 * The credentials a probe through an upstream account uses: its access token from the token API
 * (refreshed through the same guard as the hot path) and its proxy. A test of an account in
 * `error` may use the stored token as is: that is how auto-recover finds out it works again.
 */
export class AccountProbeAuth {
  constructor(
    private readonly accounts: Accounts,
    private readonly tokens: TokenApi,
  ) {}

  async resolve(accountId: number, opts: { allowUnhealthy: boolean }): Promise<ProbeAuth> {
    let token: string | null = null;
    try {
      token = (await this.tokens.getAccessToken(accountId)).access_token;
    } catch (err) {
      if (!(opts.allowUnhealthy && err instanceof AccountUnavailable && err.code === 'unavailable')) throw err;
    }
    const secrets = await this.accounts.openSecrets(accountId);
    if (!secrets) throw new AccountUnavailable(accountId, 'not_found', `account ${accountId} does not exist`);
    return { token: token ?? secrets.credentials.access_token, proxyUrl: secrets.proxyUrl };
  }
}
