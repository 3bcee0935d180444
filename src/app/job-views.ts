// Moved to jobs/job-views.ts (routes and the area list need the type below app/); kept for app/'s importers.
export * from '../jobs/job-views.js';
