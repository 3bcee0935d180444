import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../config/errors.js';

const VERSION = 'v1';

/**
 * AES-256-GCM with the master key (`RELAY_JOBS_MASTER_KEY`). Ciphertext is
 * `v1:<iv>:<tag>:<data>` in base64url; the purpose is bound as additional data, so an
 * access-token blob cannot be replayed as, say, a proxy URL. Plaintext never leaves this class
 * except to the caller that asked for it.
 */
export class SecretBox {
  private constructor(private readonly key: Buffer) {}

  static fromBase64(keyB64: string): SecretBox {
    const key = Buffer.from(keyB64, 'base64');
    if (key.length !== 32) throw new UserError('RELAY_JOBS_MASTER_KEY (security.master_key): expected 32 random bytes in base64 (e.g. `openssl rand -base64 32`)');
    return new SecretBox(key);
  }

  /** Embedded mode keeps its key in the data directory (mode 0600), created on first start. */
  static forDataDir(dataDir: string): SecretBox {
    const path = join(dataDir, 'master-key');
    if (existsSync(path)) return SecretBox.fromBase64(readFileSync(path, 'utf8').trim());
    const key = randomBytes(32).toString('base64');
    writeFileSync(path, key + '\n', { mode: 0o600 });
    return SecretBox.fromBase64(key);
  }

  /** Short, non-reversible id of the key: stored once so a replica with another key is refused at start. */
  get fingerprint(): string {
    return createHash('sha256').update('relay-jobs key check').update(this.key).digest('base64url').slice(0, 16);
  }

  seal(plaintext: string, purpose: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    cipher.setAAD(Buffer.from(purpose));
    const data = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return [VERSION, iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), data.toString('base64url')].join(':');
  }

  open(sealed: string, purpose: string): string {
    const [version, iv, tag, data] = sealed.split(':');
    if (version !== VERSION || !iv || !tag || data === undefined) throw new Error(`sealed ${purpose}: unknown format`);
    const decipher = createDecipheriv('aes-256-gcm', this.key, Buffer.from(iv, 'base64url'));
    decipher.setAAD(Buffer.from(purpose));
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    try {
      return Buffer.concat([decipher.update(Buffer.from(data, 'base64url')), decipher.final()]).toString('utf8');
    } catch {
      throw new Error(`sealed ${purpose}: cannot decrypt (wrong RELAY_JOBS_MASTER_KEY or corrupted data)`);
    }
  }
}
