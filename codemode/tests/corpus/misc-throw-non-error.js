// expect: failed:guest_error
throw { code: 'x', message: 'plain object' };
