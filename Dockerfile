# relay-jobs service image: `docker build -t relay-jobs .`
# Stage 1 compiles the service (dist/) and the web console (web/dist); stage 2 holds only what
# runs: production dependencies, the build, and no compiler. See docs/deployment.md.
# Both stages build on one exact Node 24 LTS release, the one in .nvmrc and CI's second test run
# (.ci/run); test/deploy-files.test.ts keeps the three equal. Change them together.

FROM node:24.21.0-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: `prepare` builds, and the sources are not copied yet.
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY tsconfig.json ./
COPY scripts ./scripts
COPY src ./src
COPY web ./web
RUN npm run build

FROM node:24.21.0-bookworm-slim AS runtime
ENV NODE_ENV=production \
    RELAY_JOBS_HTTP_PORT=8080 \
    RELAY_JOBS_DATA_DIR=/var/lib/relay-jobs
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts && npm cache clean --force
COPY --from=build /app/dist ./dist
COPY --from=build /app/web/dist ./web/dist
COPY config.example.yaml ./
# The embedded data directory (single-replica installs only) belongs to the unprivileged user.
RUN mkdir -p /var/lib/relay-jobs && chown node:node /var/lib/relay-jobs && chmod 0700 /var/lib/relay-jobs
USER node
EXPOSE 8080
VOLUME ["/var/lib/relay-jobs"]
# /healthz answers while the process serves HTTP; /readyz (used by orchestrators for traffic)
# also needs the backends. The slim image has no curl, so node itself asks.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.RELAY_JOBS_HTTP_PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# Exec form: node is PID 1, so SIGTERM reaches it directly and the shutdown ladder
# (shutdown.grace) runs. No npm or shell wrapper in between to swallow the signal.
ENTRYPOINT ["node", "dist/cli/main.js"]
CMD ["start"]
