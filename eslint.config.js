import js from '@eslint/js';
import tseslint from 'typescript-eslint';

// Reading the clock: only src/time/ may; everything else takes the injected Clock.
const CLOCK = [
  { selector: "CallExpression[callee.object.name='Date'][callee.property.name='now']", message: 'read time from the injected Clock (src/time/clock.ts), not Date.now()' },
  { selector: "NewExpression[callee.name='Date'][arguments.length=0]", message: 'read time from the injected Clock (src/time/clock.ts), not new Date()' },
  // Timers too: the injected Clock's setTimeout/sleep, or src/time/wall.ts where real time is the point (a socket's deadline, a watchdog).
  ...['setTimeout', 'setInterval'].map((fn) => ({
    selector: `CallExpression[callee.name='${fn}'], CallExpression[callee.object.name='globalThis'][callee.property.name='${fn}']`,
    message: `no raw ${fn}: take the injected Clock (clock.setTimeout, sleep), or src/time/wall.ts (timeout, interval, delay) where real time is the point`,
  })),
  { selector: "CallExpression[callee.object.name='performance'][callee.property.name='now']", message: 'no raw performance.now(): monotonic() from src/time/wall.ts, or the injected Clock' },
];
// SQL lives in src/store/, src/coordination/ and each area's store/ folder (its repositories) as named statements.
// SQL is written in upper case here, so English text ("create sent at …") does not match.
const SQL_START = '/^\\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|TRUNCATE)\\s/';
const SQL = [
  { selector: `Literal[value=${SQL_START}]`, message: "SQL belongs in a repository: src/store/, src/coordination/ or an area's store/ folder (a named statement)" },
  {
    selector: `TemplateLiteral > TemplateElement:first-child[value.raw=${SQL_START}]`,
    message: "SQL belongs in a repository: src/store/, src/coordination/ or an area's store/ folder (a named statement)",
  },
];

// Error statuses: only src/http/errors.ts turns an AppError kind into a status and an `{ error }` body.
// Everywhere else an error is thrown as an AppError of a kind; success codes (201/202/204) stay literal.
const ERROR_HINT = 'throw an AppError of a kind (src/errors/app-error.ts); only src/http/errors.ts maps kinds to statuses and builds error bodies';
const STATUS_CALL = 'CallExpression[callee.property.name=/^(code|status|writeHead)$/]';
const ERROR_STATUS = [
  { selector: `${STATUS_CALL}[arguments.0.type='Literal'][arguments.0.value>=400]`, message: `an error status outside src/http/errors.ts: ${ERROR_HINT}` },
  { selector: `${STATUS_CALL}[arguments.0.type!='Literal']`, message: `a computed status outside src/http/errors.ts (it may be an error): ${ERROR_HINT}` },
  { selector: "AssignmentExpression[left.property.name='statusCode']", message: `a status set by hand outside src/http/errors.ts: ${ERROR_HINT}` },
  { selector: 'CallExpression[callee.name=/^(errorBody|sendError)$/]', message: `an error body built outside src/http/errors.ts: ${ERROR_HINT}` },
  { selector: "Property[key.name='error'] > ObjectExpression.value > Property[key.name='code']", message: `a hand-built { error: {...} } body: ${ERROR_HINT}` },
];

export default tseslint.config(
  { ignores: ['dist/', '.test-dist/', 'test-artifacts/', 'node_modules/', 'docs/api/', 'coverage/', 'data/', 'web/dist/', '*.building-*/', '*.old-*/', '.build-check-*/', 'data-example/'] },
  {
    files: ['**/*.cjs', '**/*.mjs', 'scripts/**', 'eslint.config.js'],
    languageOptions: { globals: { module: 'readonly', require: 'readonly', process: 'readonly', console: 'readonly', __dirname: 'readonly' } },
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_', ignoreRestSiblings: true }],
      '@typescript-eslint/no-non-null-assertion': 'off',
      'no-constant-condition': ['error', { checkLoops: false }],
      // `let self` read by a server callback before it is assigned is the usual fixture shape.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
    },
  },
  // The console renders the API's JSON as it comes; its shapes are the API's, documented in docs/.
  { files: ['web/src/**/*.{ts,tsx}'], rules: { '@typescript-eslint/no-explicit-any': 'off' } },
  { files: ['test/**/*.ts', 'bench/**/*.ts'], rules: { '@typescript-eslint/no-explicit-any': 'off' } },
  { files: ['src/time/**/*.ts'], rules: { 'no-restricted-syntax': ['error', ...ERROR_STATUS] } },
  { files: ['src/**/*.ts'], ignores: ['src/time/**', 'src/store/**', 'src/coordination/**', 'src/areas/*/store/**'], rules: { 'no-restricted-syntax': ['error', ...CLOCK, ...SQL, ...ERROR_STATUS] } },
  { files: ['src/http/errors.ts'], rules: { 'no-restricted-syntax': ['error', ...CLOCK, ...SQL] } },
  { files: ['src/store/**/*.ts', 'src/coordination/**/*.ts', 'src/areas/*/store/**/*.ts'], rules: { 'no-restricted-syntax': ['error', ...CLOCK, ...ERROR_STATUS] } },
);
