import { z } from 'zod';

/** Field shapes every area's routes share, so one area's routes never import another's. */
export const when = z.iso.datetime({ offset: true, message: 'expected an ISO 8601 date-time such as 2027-01-31T00:00:00Z' });
export const id = z.number().int().positive();
