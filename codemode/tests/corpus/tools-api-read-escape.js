// expect: failed:guest_error
return await API.read('../../../etc/passwd');
