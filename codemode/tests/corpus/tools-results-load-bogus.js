// expect: failed:guest_error
return await results.load('result_../../etc');
